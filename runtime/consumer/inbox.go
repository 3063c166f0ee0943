package consumer

import (
	"context"
	"database/sql"
	"errors"
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

// Dialects of the inbox, the values [Config.Dialect], [DDL] and
// [MigrateSQL] take. GORM's dialector names are the same.
const (
	DialectPostgres = "postgres"
	DialectSQLite   = "sqlite"
	DialectMySQL    = "mysql"
)

// dialectOf returns the inbox dialect of a GORM dialector name or a
// database/sql driver name.
func dialectOf(name string) (string, error) {
	switch name {
	case "postgres", "pgx":
		return DialectPostgres, nil
	case "sqlite", "sqlite3":
		return DialectSQLite, nil
	case "mysql":
		return DialectMySQL, nil
	}
	return "", fmt.Errorf("%w: %q (supported: postgres, sqlite, mysql)", ErrUnsupportedDialect, name)
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
// dialect ("postgres", "sqlite" or "mysql", the last for MySQL 8 and MariaDB
// 10.6+), for users who run their own migrations. The statements are
// idempotent. An empty table means [DefaultTable].
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
	d, err := dialectOf(dialect)
	if err != nil {
		return nil, err
	}
	base := baseName(table)
	switch d {
	case DialectPostgres:
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
	case DialectMySQL:
		// One statement: MySQL has no CREATE INDEX IF NOT EXISTS. Index
		// names are per table there (and at most 64 bytes), so the index
		// is plainly processed_at. The binary collation makes consumer
		// names compare as Go strings do.
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer     VARCHAR(255) NOT NULL,
	event_id     CHAR(36) CHARACTER SET ascii NOT NULL,
	event_type   VARCHAR(255) NOT NULL,
	processed_at DATETIME(6)  NOT NULL,
	PRIMARY KEY (consumer, event_id),
	KEY processed_at (consumer, processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		}, nil
	}
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

// Migrate creates the inbox table and its index if they do not exist, in
// one transaction (on MySQL and MariaDB, whose DDL commits implicitly, one
// statement). It is safe to run on every start. An empty table means
// [DefaultTable]. Several consumers (different [Config.Name]) may share one
// table. Users of database/sql call [MigrateSQL].
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

// MigrateSQL is [Migrate] for a database/sql pool: dialect is "postgres"
// (or "pgx"), "sqlite" or "mysql", as for [Config.Dialect].
func MigrateSQL(ctx context.Context, db *sql.DB, dialect, table string) error {
	stmts, err := DDL(dialect, table)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("consumer: migrate inbox table: %w", err)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return errors.Join(fmt.Errorf("consumer: migrate inbox table: %w", err), tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("consumer: migrate inbox table: %w", err)
	}
	return nil
}

// execer is what the inbox statements run on: a *sql.Tx, or the connection
// pool of a GORM transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// inboxSQL holds the statements of one consumer's inbox, in the
// placeholders of its dialect (they run on database/sql, not through GORM).
type inboxSQL struct {
	insert string
	// pgGuard is set when insert also bounds the transaction on the server
	// (PostgreSQL): insertArgs then adds the timeout arguments.
	pgGuard bool
	// guard and unguard, when set (MySQL, MariaDB), run before the insert
	// and before the transaction ends: they set, then restore, the
	// session's timeouts.
	guard, unguard string
	prune          string
	dialect        string
}

func newInboxSQL(table, dialect string, txTimeout time.Duration) inboxSQL {
	// ON CONFLICT DO NOTHING as the first statement of the transaction:
	// a concurrent duplicate blocks on the primary key until the first
	// transaction ends, then inserts nothing (or inserts, if the first
	// rolled back). A check-then-insert would race.
	s := inboxSQL{
		dialect: dialect,
		insert:  `INSERT INTO ` + table + ` (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?) ON CONFLICT (consumer, event_id) DO NOTHING`,
		prune: `DELETE FROM ` + table + ` WHERE consumer = ? AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = ? AND processed_at < ? ORDER BY processed_at LIMIT ?)`,
	}
	switch dialect {
	case DialectPostgres:
		// The same insert, which also sets statement_timeout and
		// idle_in_transaction_session_timeout to Config.TxTimeout for the
		// rest of the transaction (set_config(..., true) is SET LOCAL), in
		// the same round trip. When the client gives up on a transaction
		// whose connection went half-open, the server still holds it open
		// with the marker's row lock, and the redelivery would wait on that
		// lock until the server's TCP keepalive notices (hours by
		// default): the timeouts make the server end it within TxTimeout.
		s.insert = `INSERT INTO ` + table + ` (consumer, event_id, event_type, processed_at)
			SELECT $1::text, $2::uuid, $3::text, $4::timestamptz
			FROM (SELECT set_config('statement_timeout', $5::text, true), set_config('idle_in_transaction_session_timeout', $6::text, true)) AS guard
			ON CONFLICT (consumer, event_id) DO NOTHING`
		s.pgGuard = true
		s.prune = `DELETE FROM ` + table + ` WHERE consumer = $1 AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = $2 AND processed_at < $3 ORDER BY processed_at LIMIT $4)`
	case DialectMySQL:
		// INSERT IGNORE reports 0 rows for a duplicate key, with or without
		// clientFoundRows (which changes what ON DUPLICATE KEY UPDATE
		// reports). A concurrent duplicate waits on the primary key, as
		// on PostgreSQL, until the first transaction ends. IGNORE would
		// also truncate an overlong value: [Config.Validate] keeps Name
		// within the column.
		s.insert = `INSERT IGNORE INTO ` + table + ` (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?)`
		// MySQL has no SET LOCAL: the session's wait_timeout (how long the
		// server waits for a client's next statement, in a transaction or
		// not) and innodb_lock_wait_timeout are set to TxTimeout for the
		// transaction and restored before it ends. A client that vanished
		// mid-transaction is disconnected, its transaction rolled back and
		// its marker's lock released, within TxTimeout of its last
		// statement; a redelivery waiting on a lock gives up within
		// TxTimeout on the server too. The old values are read in the same
		// statement, before any assignment (MySQL evaluates a SET's
		// expressions first).
		secs := strconv.FormatInt(min(max(1, int64((txTimeout+time.Second-1)/time.Second)), mysqlMaxWaitTimeout), 10)
		s.guard = `SET @outbox_inbox_wt = @@SESSION.wait_timeout, @outbox_inbox_lwt = @@SESSION.innodb_lock_wait_timeout, ` +
			`SESSION wait_timeout = ` + secs + `, SESSION innodb_lock_wait_timeout = ` + secs
		s.unguard = `SET SESSION wait_timeout = @outbox_inbox_wt, SESSION innodb_lock_wait_timeout = @outbox_inbox_lwt`
		// MySQL rejects LIMIT in an IN subquery and a subquery on the
		// table being deleted from; a single-table DELETE takes ORDER BY
		// and LIMIT itself.
		s.prune = `DELETE FROM ` + table + ` WHERE consumer = ? AND processed_at < ? ORDER BY processed_at LIMIT ?`
	}
	return s
}

// mysqlMaxWaitTimeout is the largest wait_timeout MySQL accepts (a year, in
// seconds).
const mysqlMaxWaitTimeout = 31536000

// insertArgs returns the arguments of insert for the event of m.
func (s inboxSQL) insertArgs(cfg Config, m Meta) []any {
	args := []any{cfg.Name, m.EventID.String(), m.EventType, cfg.Clock.Now().UTC()}
	if s.pgGuard {
		// In whole milliseconds, rounded up, within PostgreSQL's range.
		ms := strconv.FormatInt(min(int64(max(1, (cfg.TxTimeout+time.Millisecond-1)/time.Millisecond)), math.MaxInt32), 10)
		args = append(args, ms, ms)
	}
	return args
}

// pruneArgs returns the arguments of prune.
func (s inboxSQL) pruneArgs(cfg Config, cutoff time.Time) []any {
	if s.dialect == DialectMySQL {
		return []any{cfg.Name, cutoff, cfg.PruneBatchSize}
	}
	return []any{cfg.Name, cfg.Name, cutoff, cfg.PruneBatchSize}
}

// mark inserts the inbox marker of m's event in tx, after setting the
// session's timeouts where that takes a statement of its own, and reports
// whether it inserted one (false: the event was applied before). When mark
// returns without error, the caller must call s.restore before the
// transaction ends.
func (s inboxSQL) mark(ctx context.Context, tx execer, cfg Config, m Meta) (bool, error) {
	if s.guard != "" {
		if _, err := tx.ExecContext(ctx, s.guard); err != nil {
			return false, fmt.Errorf("set session timeouts: %w", err)
		}
	}
	res, err := tx.ExecContext(ctx, s.insert, s.insertArgs(cfg, m)...)
	if err != nil {
		return false, errors.Join(fmt.Errorf("insert marker: %w", err), s.restore(ctx, tx))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, errors.Join(fmt.Errorf("insert marker: rows affected: %w", err), s.restore(ctx, tx))
	}
	return n > 0, nil
}

// restore undoes what mark set on the session, before the transaction
// ends. When it fails the connection is usually gone (a deadline); if it
// is not, the session keeps TxTimeout as its wait_timeout and lock wait,
// which costs a reconnect after an idle TxTimeout and nothing else.
func (s inboxSQL) restore(ctx context.Context, tx execer) error {
	if s.unguard == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.unguard); err != nil {
		return fmt.Errorf("restore session timeouts: %w", err)
	}
	return nil
}

// PruneInbox deletes this consumer's inbox entries older than
// [Config.InboxRetention], at most [Config.PruneBatchSize] per statement
// (each in its own transaction), until none is left, and returns how many it
// deleted. Run it periodically (hourly, say) from one instance or several:
// concurrent runs are safe. It returns ctx's error when ctx is done between
// batches, with the count so far.
func (c *Consumer) PruneInbox(ctx context.Context) (int64, error) {
	if c.sqlDB == nil {
		return 0, fmt.Errorf("consumer: prune inbox: %w: no DB", ErrInvalidConfig)
	}
	cutoff := c.cfg.Clock.Now().Add(-c.cfg.InboxRetention).UTC()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("consumer: prune inbox: %w", err)
		}
		res, err := c.sqlDB.ExecContext(ctx, c.sql.prune, c.sql.pruneArgs(c.cfg, cutoff)...)
		if err != nil {
			return total, fmt.Errorf("consumer: prune inbox: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("consumer: prune inbox: rows affected: %w", err)
		}
		total += n
		if n < int64(c.cfg.PruneBatchSize) {
			return total, nil
		}
	}
}
