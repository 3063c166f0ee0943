package hooks

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// DefaultTable is the outbox table used when a Config leaves Table empty.
const DefaultTable = "outbox_messages"

// Shards is the number of shards the outbox's aggregates are hashed into.
// Each row stores its shard; relays sharing a table divide the shards between
// them with leases (see [Store]), so one aggregate is only ever published by
// one relay at a time. It is part of the table's format: every writer and
// relay of a table must agree on it.
const Shards = 64

// maxBaseName is the longest unqualified table name: the longest name the
// schema derives from it (base + "_blocked_aggregate" and the like) must fit
// in PostgreSQL's 63-byte identifiers, or PostgreSQL would silently truncate
// it and two indexes could collide.
const maxBaseName = 63 - len("_pending_shard")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validTable checks a table name, optionally schema-qualified
// ("events.outbox"): each part must be a plain identifier, so it can be
// spliced into SQL without quoting; the schema at most 63 bytes and the
// table at most 49, so that every index, table and trigger name derived
// from it fits in 63 bytes.
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
	if len(parts) == 2 && len(parts[0]) > 63 {
		return fmt.Errorf("%w: %q: the schema name is %d bytes, more than 63", ErrInvalidTable, name, len(parts[0]))
	}
	if base := parts[len(parts)-1]; len(base) > maxBaseName {
		return fmt.Errorf("%w: %q: the table name is %d bytes; at most %d, so that the names derived from it (%s_pending_shard, ...) fit in 63",
			ErrInvalidTable, name, len(base), maxBaseName, base)
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

// leasesTable and relaysTable name the tables that divide the shards among
// relays.
func leasesTable(table string) string { return qualify(table, baseName(table)+"_leases") }
func relaysTable(table string) string { return qualify(table, baseName(table)+"_relays") }

// aggregateHash is the 32-bit FNV-1a hash of an aggregate, the source of its
// shard and of its write lock key.
func aggregateHash(aggType, aggID string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(aggType))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(aggID))
	return h.Sum32()
}

// ShardOf returns the shard of an aggregate, which every outbox row stores:
// the FNV-1a hash of the aggregate type, a zero byte and the aggregate id,
// modulo [Shards]. Code that writes outbox rows without the plugin (a
// migration, another language) must store the same value.
func ShardOf(aggType, aggID string) int16 {
	return int16(aggregateHash(aggType, aggID) % Shards)
}

// seedLeases is the statement that creates one lease row per shard.
func seedLeases(table, conflict string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + leasesTable(table) + " (shard) VALUES ")
	for i := range Shards {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + strconv.Itoa(i) + ")")
	}
	b.WriteString(" " + conflict)
	return b.String()
}

// upgradePostgres brings a table of an earlier version up to date: rows get
// a shard, and JSONB payloads and headers (which refuse a NUL character and
// cost a parse per insert) become TEXT. It takes no lock on a table that is
// already up to date.
func upgradePostgres(table string) string {
	schema := "current_schema()"
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		schema = "lower('" + table[:i] + "')"
	}
	col := `FROM information_schema.columns WHERE table_schema = ` + schema + ` AND table_name = lower('` + baseName(table) + `')`
	return `DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 ` + col + ` AND column_name = 'shard') THEN
		ALTER TABLE ` + table + ` ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
	END IF;
	IF EXISTS (SELECT 1 ` + col + ` AND column_name = 'payload' AND data_type = 'jsonb') THEN
		ALTER TABLE ` + table + ` ALTER COLUMN payload TYPE TEXT, ALTER COLUMN headers TYPE TEXT;
	END IF;
END
$$`
}

// DDL returns the statements that create the outbox table, its indexes, the
// two small tables relays share it through (leases per shard, relays alive)
// and, for PostgreSQL, the NOTIFY trigger, for dialect ("postgres" or
// "sqlite"), for users who run their own migrations. The statements are
// idempotent, and bring a table created by an earlier version up to date.
// An empty table means [DefaultTable].
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
	id              BIGSERIAL PRIMARY KEY,
	event_id        UUID        NOT NULL,
	event_type      TEXT        NOT NULL,
	event_version   INTEGER     NOT NULL,
	aggregate_type  TEXT        NOT NULL,
	aggregate_id    TEXT        NOT NULL,
	shard           SMALLINT    NOT NULL DEFAULT 0,
	topic           TEXT        NOT NULL,
	payload         TEXT        NOT NULL,
	headers         TEXT,
	occurred_at     TIMESTAMPTZ NOT NULL,
	created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
	published_at    TIMESTAMPTZ,
	attempts        INTEGER     NOT NULL DEFAULT 0,
	last_error      TEXT,
	next_attempt_at TIMESTAMPTZ,
	parked_at       TIMESTAMPTZ
)`,
			upgradePostgres(table),
			`CREATE UNIQUE INDEX IF NOT EXISTS ` + base + `_event_id ON ` + table + ` (event_id)`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_pending ON ` + table + ` (id) WHERE published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_blocked ON ` + table + ` (aggregate_type, aggregate_id)
	WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_parked ON ` + table + ` (id) WHERE parked_at IS NOT NULL AND published_at IS NULL`,
			`CREATE TABLE IF NOT EXISTS ` + leasesTable(table) + ` (
	shard      SMALLINT PRIMARY KEY,
	owner      TEXT,
	expires_at TIMESTAMPTZ
)`,
			seedLeases(table, "ON CONFLICT DO NOTHING"),
			`CREATE TABLE IF NOT EXISTS ` + relaysTable(table) + ` (
	owner      TEXT PRIMARY KEY,
	expires_at TIMESTAMPTZ NOT NULL
)`,
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
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id        TEXT     NOT NULL,
	event_type      TEXT     NOT NULL,
	event_version   INTEGER  NOT NULL,
	aggregate_type  TEXT     NOT NULL,
	aggregate_id    TEXT     NOT NULL,
	shard           INTEGER  NOT NULL DEFAULT 0,
	topic           TEXT     NOT NULL,
	payload         TEXT     NOT NULL,
	headers         TEXT,
	occurred_at     DATETIME NOT NULL,
	created_at      DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
	published_at    DATETIME,
	attempts        INTEGER  NOT NULL DEFAULT 0,
	last_error      TEXT,
	next_attempt_at INTEGER, -- unix microseconds
	parked_at       DATETIME
)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS ` + qualify(table, base+`_event_id`) + ` ON ` + base + ` (event_id)`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_pending`) + ` ON ` + base + ` (id) WHERE published_at IS NULL AND parked_at IS NULL`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_blocked`) + ` ON ` + base + ` (aggregate_type, aggregate_id)
	WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_parked`) + ` ON ` + base + ` (id) WHERE parked_at IS NOT NULL AND published_at IS NULL`,
			`CREATE TABLE IF NOT EXISTS ` + leasesTable(table) + ` (
	shard      INTEGER PRIMARY KEY,
	owner      TEXT,
	expires_at INTEGER -- unix microseconds
)`,
			seedLeases(table, "ON CONFLICT DO NOTHING"),
			`CREATE TABLE IF NOT EXISTS ` + relaysTable(table) + ` (
	owner      TEXT PRIMARY KEY,
	expires_at INTEGER NOT NULL -- unix microseconds
)`,
		}, nil
	default:
		return nil, fmt.Errorf("%w: %q (supported: postgres, sqlite)", ErrUnsupportedDialect, dialect)
	}
}

// Migrate creates the outbox table, its indexes, its lease tables and
// (PostgreSQL) its NOTIFY trigger if they do not exist, in one transaction.
// It is safe to run on every start. An empty table means [DefaultTable].
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	stmts, err := DDL(db.Dialector.Name(), table)
	if err != nil {
		return err
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if db.Dialector.Name() == "postgres" {
			// Concurrent first starts would race on CREATE ... IF NOT
			// EXISTS; serialise them.
			if err := tx.Exec(`SELECT pg_advisory_xact_lock(` + strconv.Itoa(int(int32(aggregateHash("outbox:migrate", table)))) + `)`).Error; err != nil {
				return fmt.Errorf("hooks: migrate outbox table: %w", err)
			}
		}
		for _, s := range stmts {
			if err := tx.Exec(s).Error; err != nil {
				return fmt.Errorf("hooks: migrate outbox table: %w", err)
			}
		}
		return nil
	})
}
