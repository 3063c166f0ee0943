package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// validTable checks an inbox table name, optionally schema-qualified
// ("billing.inbox"): each part must be a plain identifier of at most 63
// bytes, so it can be spliced into SQL without quoting.
func validTable(name string) error {
	return inboxErr(sqlstore.CheckTable(name, sqlstore.MaxInboxTableName))
}

// inboxErr wraps the storage layer's table and dialect errors in this
// package's sentinels too, so that both match.
func inboxErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sqlstore.ErrInvalidTable):
		return fmt.Errorf("%w: %w", ErrInvalidTable, err)
	case errors.Is(err, sqlstore.ErrUnsupportedDialect):
		return fmt.Errorf("%w: %w", ErrUnsupportedDialect, err)
	}
	return err
}

// Dialects of the inbox, the values [DDL] takes. GORM's dialector names
// are the same.
const (
	DialectPostgres = "postgres"
	DialectSQLite   = "sqlite"
	DialectMySQL    = "mysql"
)

// dialectOf returns the inbox dialect of a GORM dialector name or a
// database/sql driver name.
func dialectOf(name string) (string, error) {
	d, err := sqlstore.ParseDialect(name)
	return string(d), inboxErr(err)
}

// DDL returns the statements that create the inbox table and its index for
// dialect ("postgres", "sqlite" or "mysql", the last for MySQL 8 and MariaDB
// 10.6+), for users who run their own migrations: [sqlstore.InboxDDL], which
// holds the inbox's SQL. The statements are idempotent. An empty table means
// [DefaultTable].
//
// The table has one row per applied event and consumer: the primary key
// (consumer, event_id) is what makes a second delivery a no-op, and the
// index on (consumer, processed_at) serves [Consumer.PruneInbox].
func DDL(dialect, table string) ([]string, error) {
	d, err := sqlstore.ParseDialect(dialect)
	if err != nil {
		return nil, inboxErr(err)
	}
	stmts, err := sqlstore.InboxDDL(d, table)
	return stmts, inboxErr(err)
}

// Migrate creates the inbox table and its index if they do not exist, in
// one transaction (on MySQL and MariaDB, whose DDL commits implicitly, one
// statement), on db in its dialect (db.Dialect()): any driver, as for
// [Config.DB]. It is safe to run on every start. An empty table means
// [DefaultTable]. Several consumers (different [Config.Name]) may share one
// table. It runs [sqlstore.Migrate].
func Migrate(ctx context.Context, db sqlstore.DB, table string) error {
	if db == nil {
		return fmt.Errorf("consumer: migrate inbox table: %w: nil DB", ErrInvalidConfig)
	}
	d, err := Config{DB: db}.dialect()
	if err != nil {
		return fmt.Errorf("consumer: migrate inbox table: %w", err)
	}
	if err := sqlstore.Migrate(ctx, db, sqlstore.Schema{Dialect: sqlstore.Dialect(d), Inbox: true, InboxTable: table}); err != nil {
		return fmt.Errorf("consumer: %w", inboxErr(err))
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
	if c.sql == nil {
		return 0, fmt.Errorf("consumer: prune inbox: %w: no DB", ErrInvalidConfig)
	}
	cutoff := c.cfg.Clock.Now().Add(-c.cfg.InboxRetention).UTC()
	n, err := c.sql.Prune(ctx, c.cfg.DB, c.cfg.Name, cutoff, c.cfg.PruneBatchSize)
	if err != nil {
		return n, fmt.Errorf("consumer: %w", err)
	}
	return n, nil
}

// InboxSize returns how many inbox entries this consumer has: one per event
// it applied through the inbox and [Consumer.PruneInbox] has not deleted
// yet. It counts them (see sqlstore.Inbox.Count), so call it at a modest
// rate: adapters/metrics caches it between scrapes.
func (c *Consumer) InboxSize(ctx context.Context) (int64, error) {
	if c.sql == nil {
		return 0, fmt.Errorf("consumer: inbox size: %w: no DB", ErrInvalidConfig)
	}
	n, err := c.sql.Count(ctx, c.cfg.DB, c.cfg.Name)
	if err != nil {
		return 0, fmt.Errorf("consumer: %w", err)
	}
	return n, nil
}
