// Package databasesql is the database/sql driver of the storage layer
// (package runtime/sqlstore): it runs the store, the writer and the inbox
// on a *sql.DB and on the transactions and connections of database/sql —
// PostgreSQL through pgx's stdlib driver (github.com/jackc/pgx/v5/stdlib,
// which LISTEN/NOTIFY needs) or lib/pq, MySQL 8 / MariaDB 10.6+ through
// github.com/go-sql-driver/mysql, SQLite through the glebarez, modernc or
// mattn drivers — and on anything shaped like them ([Querier]: GORM's
// connection pools are).
//
// Wrap the pool once with [New] and hand it to sqlstore.NewStore and the
// Migrate functions; wrap a business transaction with [Executor] (or
// [DB.UnwrapExecutor], for a *sql.Tx) to write its events with a sqlstore.Writer or
// record them with a sqlstore.Inbox:
//
//	db, err := sql.Open("pgx", dsn)
//	drv := databasesql.New(db)
//	store, err := sqlstore.NewStore(drv, sqlstore.StoreConfig{})
//	...
//	tx, err := db.BeginTx(ctx, nil)
//	_, err = writer.Write(ctx, databasesql.Executor(tx), rows)
//
// For pgx's own pool and transactions, use package
// runtime/sqlstore/pgxv5 instead; for GORM, package hooks.
package databasesql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Querier is a database/sql executor: a *sql.DB, *sql.Conn or *sql.Tx, or
// the connection pool of a GORM statement (gorm.ConnPool has these
// methods); sqlc's DBTX for database/sql is one too.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DB is a *sql.DB as the storage layer's driver: a sqlstore.DB and a
// sqlstore.Driver[*sql.Tx]. It is safe for concurrent use. For the
// executor of GORM's pools or of a *sql.Conn, use the free function
// [Executor].
type DB struct {
	db      *sql.DB
	dialect sqlstore.Dialect
}

// New wraps db. Its dialect is read from its driver's type
// (sqlstore.DialectOf); to name it yourself (an instrumented driver), set
// StoreConfig.Dialect or use [NewWithDialect].
// A nil db gives a nil *DB, which the sqlstore functions refuse.
func New(db *sql.DB) *DB {
	if db == nil {
		return nil
	}
	return &DB{db: db}
}

// NewWithDialect wraps db, whose dialect is d.
func NewWithDialect(db *sql.DB, d sqlstore.Dialect) *DB {
	if db == nil {
		return nil
	}
	return &DB{db: db, dialect: d}
}

// SQLDB returns the wrapped *sql.DB.
func (d *DB) SQLDB() *sql.DB { return d.db }

// Dialect implements sqlstore.DB.
func (d *DB) Dialect() (sqlstore.Dialect, error) {
	if d.dialect != "" {
		return d.dialect, nil
	}
	return sqlstore.DialectOf(d.db)
}

// MaxConns implements sqlstore.DB: the pool's SetMaxOpenConns, 0 if
// unlimited.
func (d *DB) MaxConns() int { return d.db.Stats().MaxOpenConnections }

// UnwrapExecutor implements sqlstore.Driver: it is [Executor] of tx.
func (d *DB) UnwrapExecutor(tx *sql.Tx) sqlstore.Executor { return Executor(tx) }

// UnwrapTx implements sqlstore.Driver: the *sql.Tx under a transaction
// that d or one of its Conns began, nil for any other.
func (d *DB) UnwrapTx(_ context.Context, t sqlstore.Tx) *sql.Tx {
	if t, ok := t.(*tx); ok {
		return t.tx
	}
	return nil
}

// ExecContext implements sqlstore.Executor.
func (d *DB) ExecContext(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	return d.db.ExecContext(ctx, query, args...)
}

// QueryContext implements sqlstore.Executor.
func (d *DB) QueryContext(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return queryRows(d.db.QueryContext(ctx, query, args...))
}

// QueryRowContext implements sqlstore.Executor.
func (d *DB) QueryRowContext(ctx context.Context, query string, args ...any) sqlstore.RowScanner {
	return d.db.QueryRowContext(ctx, query, args...)
}

// BeginTx implements sqlstore.Beginner.
func (d *DB) BeginTx(ctx context.Context, opts *sql.TxOptions) (sqlstore.Tx, error) {
	return beginTx(d.db.BeginTx(ctx, opts))
}

// Conn implements sqlstore.DB: it takes a *sql.Conn.
func (d *DB) Conn(ctx context.Context) (sqlstore.Conn, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, key: driverConn(c)}, nil
}

// Executor wraps q, a transaction, a connection or a pool of database/sql
// or anything shaped like them, for a sqlstore.Writer or sqlstore.Inbox.
// The executor of a q that is not a transaction (it has no Commit method)
// can begin one, when q can (a *sql.DB, a *sql.Conn, GORM's pool): a
// Writer on MySQL begins its own then.
func Executor(q Querier) sqlstore.Executor {
	if _, ok := q.(interface{ Commit() error }); ok {
		return txExec{q}
	}
	return poolExec{txExec{q}}
}

// txExec runs statements on a Querier.
type txExec struct{ q Querier }

func (e txExec) ExecContext(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	return e.q.ExecContext(ctx, query, args...)
}

func (e txExec) QueryContext(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return queryRows(e.q.QueryContext(ctx, query, args...))
}

func (e txExec) QueryRowContext(ctx context.Context, query string, args ...any) sqlstore.RowScanner {
	return e.q.QueryRowContext(ctx, query, args...)
}

// poolExec is a txExec outside a transaction, which can begin one.
type poolExec struct{ txExec }

func (e poolExec) BeginTx(ctx context.Context, opts *sql.TxOptions) (sqlstore.Tx, error) {
	switch b := e.q.(type) {
	case interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}:
		return beginTx(b.BeginTx(ctx, opts))
	case interface{ GetDBConn() (*sql.DB, error) }: // GORM's pools
		db, err := b.GetDBConn()
		if err != nil {
			return nil, err
		}
		return beginTx(db.BeginTx(ctx, opts))
	}
	return nil, fmt.Errorf("databasesql: %T cannot begin a transaction", e.q)
}

// queryRows returns rows as sqlstore.Rows, and a nil interface (not a nil
// *sql.Rows) with an error.
func queryRows(rows *sql.Rows, err error) (sqlstore.Rows, error) {
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// tx is a *sql.Tx.
type tx struct {
	txExec
	tx *sql.Tx
}

func beginTx(t *sql.Tx, err error) (sqlstore.Tx, error) {
	if err != nil {
		return nil, err
	}
	return &tx{txExec: txExec{t}, tx: t}, nil
}

func (t *tx) Commit(context.Context) error   { return t.tx.Commit() }
func (t *tx) Rollback(context.Context) error { return t.tx.Rollback() }

// conn is a *sql.Conn.
type conn struct {
	c *sql.Conn
	// key is the driver connection, read when the connection was taken:
	// database/sql may close c from a goroutine of its own (a transaction
	// whose context ended rolls back and hands the connection back in the
	// background), and a Raw call that races with that close dereferences
	// the nil driver connection it left (Go 1.26's Conn.Raw checks
	// whether c is closed before it takes c's lock).
	key any
}

// driverConn returns c's driver connection.
func driverConn(c *sql.Conn) any {
	var dc any
	_ = c.Raw(func(d any) error {
		dc = d
		return nil
	})
	return dc
}

func (c *conn) ExecContext(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	return c.c.ExecContext(ctx, query, args...)
}

func (c *conn) QueryContext(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return queryRows(c.c.QueryContext(ctx, query, args...))
}

func (c *conn) QueryRowContext(ctx context.Context, query string, args ...any) sqlstore.RowScanner {
	return c.c.QueryRowContext(ctx, query, args...)
}

func (c *conn) BeginTx(ctx context.Context, opts *sql.TxOptions) (sqlstore.Tx, error) {
	return beginTx(c.c.BeginTx(ctx, opts))
}

func (c *conn) PingContext(ctx context.Context) error { return c.c.PingContext(ctx) }
func (c *conn) Close() error                          { return c.c.Close() }

// Discard makes database/sql drop the driver connection: a Raw call that
// returns driver.ErrBadConn marks it bad. When database/sql closed c
// meanwhile in a goroutine of its own (see conn.key), the Raw call can
// panic on the driver connection the close took away; c is then closed
// already, and Discard has nothing left to do.
func (c *conn) Discard() {
	defer func() { _ = recover() }()
	_ = c.c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.c.Close()
}

// Key is the driver connection, the same on each take from the pool.
func (c *conn) Key() any { return c.key }

// onPgx runs fn on pgx's connection under c, when the driver is pgx's,
// inside Raw (where database/sql lets it be used); other drivers get an
// error wrapping errors.ErrUnsupported.
func (c *conn) onPgx(what string, fn func(*pgx.Conn) error) error {
	var ferr error
	err := c.c.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			ferr = fmt.Errorf("databasesql: %s needs pgx's stdlib driver, not %T: %w", what, dc, errors.ErrUnsupported)
			return nil
		}
		ferr = fn(pc.Conn())
		return nil
	})
	return errors.Join(ferr, err)
}

// Listen implements sqlstore.Listener on pgx's connection.
func (c *conn) Listen(ctx context.Context, channel string) error {
	return c.onPgx("LISTEN", func(pc *pgx.Conn) error {
		_, err := pc.Exec(ctx, "LISTEN "+channel)
		return err
	})
}

// WaitForNotification implements sqlstore.Listener.
func (c *conn) WaitForNotification(ctx context.Context) error {
	return c.onPgx("a notification", func(pc *pgx.Conn) error {
		_, err := pc.WaitForNotification(ctx)
		return err
	})
}

// IsClosed implements sqlstore.Listener.
func (c *conn) IsClosed() bool {
	closed := true
	_ = c.onPgx("IsClosed", func(pc *pgx.Conn) error {
		closed = pc.IsClosed()
		return nil
	})
	return closed
}

var (
	_ sqlstore.Driver[*sql.Tx] = (*DB)(nil)
	_ sqlstore.Listener        = (*conn)(nil)
)
