package hooks

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"gorm.io/gorm"
)

// DefaultTable is the outbox table used when a Config leaves Table empty.
const DefaultTable = "outbox_messages"

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// validTable checks a table name, optionally schema-qualified
// ("events.outbox"): each part must be a plain identifier of at most 63
// bytes, so it can be spliced into SQL without quoting.
func validTable(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w: %q has more than one dot", ErrInvalidTable, name)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return fmt.Errorf("%w: %q: each part must match %s", ErrInvalidTable, name, identRE)
		}
	}
	return nil
}

// baseName is the unqualified table name, used to name indexes, functions,
// triggers and the NOTIFY channel.
func baseName(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}

// qualify prefixes name with table's schema, if any.
func qualify(table, name string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[:i+1] + name
	}
	return name
}

// DDL returns the statements that create the outbox table and its indexes
// (and, for PostgreSQL, the NOTIFY trigger) for dialect ("postgres" or
// "sqlite"), for users who run their own migrations. The statements are
// idempotent. An empty table means [DefaultTable].
func DDL(dialect, table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return nil, err
	}
	base := baseName(table)
	switch dialect {
	case "postgres":
		fn := qualify(table, base+"_notify")
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id             BIGSERIAL PRIMARY KEY,
	event_id       UUID        NOT NULL,
	event_type     TEXT        NOT NULL,
	event_version  INTEGER     NOT NULL,
	aggregate_type TEXT        NOT NULL,
	aggregate_id   TEXT        NOT NULL,
	topic          TEXT        NOT NULL,
	payload        JSONB       NOT NULL,
	headers        JSONB,
	occurred_at    TIMESTAMPTZ NOT NULL,
	created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
	published_at   TIMESTAMPTZ,
	attempts       INTEGER     NOT NULL DEFAULT 0,
	last_error     TEXT,
	next_attempt_at TIMESTAMPTZ,
	parked_at      TIMESTAMPTZ
)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS ` + base + `_event_id ON ` + table + ` (event_id)`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_pending ON ` + table + ` (id) WHERE published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_pending_aggregate ON ` + table + ` (aggregate_type, aggregate_id, id) WHERE published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_waiting ON ` + table + ` (next_attempt_at) WHERE next_attempt_at IS NOT NULL AND published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_parked ON ` + table + ` (id) WHERE parked_at IS NOT NULL AND published_at IS NULL`,
			`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('` + base + `', '');
	RETURN NULL;
END
$$`,
			`CREATE OR REPLACE TRIGGER ` + base + `_notify AFTER INSERT ON ` + table +
				` FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `()`,
		}, nil
	case "sqlite":
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id             INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id       TEXT     NOT NULL,
	event_type     TEXT     NOT NULL,
	event_version  INTEGER  NOT NULL,
	aggregate_type TEXT     NOT NULL,
	aggregate_id   TEXT     NOT NULL,
	topic          TEXT     NOT NULL,
	payload        TEXT     NOT NULL,
	headers        TEXT,
	occurred_at    DATETIME NOT NULL,
	created_at     DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
	published_at   DATETIME,
	attempts       INTEGER  NOT NULL DEFAULT 0,
	last_error     TEXT,
	next_attempt_at INTEGER, -- unix microseconds
	parked_at      DATETIME
)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS ` + qualify(table, base+`_event_id`) + ` ON ` + base + ` (event_id)`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_pending`) + ` ON ` + base + ` (id) WHERE published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_waiting`) + ` ON ` + base + ` (next_attempt_at) WHERE next_attempt_at IS NOT NULL AND published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_parked`) + ` ON ` + base + ` (id) WHERE parked_at IS NOT NULL AND published_at IS NULL`,
		}, nil
	default:
		return nil, fmt.Errorf("%w: %q (supported: postgres, sqlite)", ErrUnsupportedDialect, dialect)
	}
}

// Migrate creates the outbox table, its indexes and (PostgreSQL) its NOTIFY
// trigger if they do not exist, in one transaction. It is safe to run on
// every start. An empty table means [DefaultTable].
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	stmts, err := DDL(db.Dialector.Name(), table)
	if err != nil {
		return err
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, s := range stmts {
			if err := tx.Exec(s).Error; err != nil {
				return fmt.Errorf("hooks: migrate outbox table: %w", err)
			}
		}
		return nil
	})
}
