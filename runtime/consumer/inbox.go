package consumer

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// validTable checks a table name, optionally schema-qualified
// ("billing.inbox"): each part must be a plain identifier of at most 63
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

// dialectOf checks that the inbox has SQL for a GORM dialect.
func dialectOf(name string) (string, error) {
	switch name {
	case "postgres", "sqlite":
		return name, nil
	}
	return "", fmt.Errorf("%w: %q (supported: postgres, sqlite)", ErrUnsupportedDialect, name)
}

// baseName is the unqualified table name, used to name the index.
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

// DDL returns the statements that create the inbox table and its index for
// dialect ("postgres" or "sqlite"), for users who run their own migrations.
// The statements are idempotent. An empty table means [DefaultTable].
//
// The table has one row per applied event and consumer: the primary key
// (consumer, event_id) is what makes a second delivery a no-op, and the
// index on (consumer, processed_at) serves [Consumer.PruneInbox].
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
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer     TEXT        NOT NULL,
	event_id     UUID        NOT NULL,
	event_type   TEXT        NOT NULL,
	processed_at TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (consumer, event_id)
)`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_processed_at ON ` + table + ` (consumer, processed_at)`,
		}, nil
	case "sqlite":
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer     TEXT     NOT NULL,
	event_id     TEXT     NOT NULL,
	event_type   TEXT     NOT NULL,
	processed_at DATETIME NOT NULL,
	PRIMARY KEY (consumer, event_id)
)`,
			`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_processed_at`) + ` ON ` + base + ` (consumer, processed_at)`,
		}, nil
	}
	_, err := dialectOf(dialect)
	return nil, err
}

// Migrate creates the inbox table and its index if they do not exist, in
// one transaction. It is safe to run on every start. An empty table means
// [DefaultTable]. Several consumers (different [Config.Name]) may share one
// table.
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	stmts, err := DDL(db.Dialector.Name(), table)
	if err != nil {
		return err
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, s := range stmts {
			if err := tx.Exec(s).Error; err != nil {
				return fmt.Errorf("consumer: migrate inbox table: %w", err)
			}
		}
		return nil
	})
}

// inboxSQL holds the statements of one consumer's inbox.
type inboxSQL struct {
	insert string
	// guard is set when insert also bounds the transaction on the server
	// (PostgreSQL): insertArgs then adds the timeout arguments.
	guard bool
	prune string
}

func newInboxSQL(table, dialect string) inboxSQL {
	// ON CONFLICT DO NOTHING as the first statement of the transaction:
	// a concurrent duplicate blocks on the primary key until the first
	// transaction ends, then inserts nothing (or inserts, if the first
	// rolled back). A check-then-insert would race.
	s := inboxSQL{
		insert: `INSERT INTO ` + table + ` (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?) ON CONFLICT (consumer, event_id) DO NOTHING`,
		prune: `DELETE FROM ` + table + ` WHERE consumer = ? AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = ? AND processed_at < ? ORDER BY processed_at LIMIT ?)`,
	}
	if dialect == "postgres" {
		// The same insert, which also sets statement_timeout and
		// idle_in_transaction_session_timeout to Config.TxTimeout for the
		// rest of the transaction (set_config(..., true) is SET LOCAL), in
		// the same round trip. When the client gives up on a transaction
		// whose connection went half-open, the server still holds it open
		// with the marker's row lock, and the redelivery would wait on that
		// lock until the server's TCP keepalive notices (hours by
		// default): the timeouts make the server end it within TxTimeout.
		s.insert = `INSERT INTO ` + table + ` (consumer, event_id, event_type, processed_at)
			SELECT ?::text, ?::uuid, ?::text, ?::timestamptz
			FROM (SELECT set_config('statement_timeout', ?::text, true), set_config('idle_in_transaction_session_timeout', ?::text, true)) AS guard
			ON CONFLICT (consumer, event_id) DO NOTHING`
		s.guard = true
	}
	return s
}

// insertArgs returns the arguments of insert for the event of m.
func (s inboxSQL) insertArgs(cfg Config, m Meta) []any {
	args := []any{cfg.Name, m.EventID.String(), m.EventType, cfg.Clock.Now().UTC()}
	if s.guard {
		// In whole milliseconds, rounded up, within PostgreSQL's range.
		ms := strconv.FormatInt(min(int64(max(1, (cfg.TxTimeout+time.Millisecond-1)/time.Millisecond)), math.MaxInt32), 10)
		args = append(args, ms, ms)
	}
	return args
}

// PruneInbox deletes this consumer's inbox entries older than
// [Config.InboxRetention], at most [Config.PruneBatchSize] per statement
// (each in its own transaction), until none is left, and returns how many it
// deleted. Run it periodically (hourly, say) from one instance or several:
// concurrent runs are safe. It returns ctx's error when ctx is done between
// batches, with the count so far.
func (c *Consumer) PruneInbox(ctx context.Context) (int64, error) {
	if c.db == nil {
		return 0, fmt.Errorf("consumer: prune inbox: %w: no DB", ErrInvalidConfig)
	}
	cutoff := c.cfg.Clock.Now().Add(-c.cfg.InboxRetention).UTC()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("consumer: prune inbox: %w", err)
		}
		res := c.db.WithContext(ctx).Exec(c.sql.prune, c.cfg.Name, c.cfg.Name, cutoff, c.cfg.PruneBatchSize)
		if res.Error != nil {
			return total, fmt.Errorf("consumer: prune inbox: %w", res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < int64(c.cfg.PruneBatchSize) {
			return total, nil
		}
	}
}
