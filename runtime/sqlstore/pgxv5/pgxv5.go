// Package pgxv5 is the native pgx v5 driver of the storage layer (package
// runtime/sqlstore), for PostgreSQL services that use pgx's own pool and
// transactions — as sqlc's pgx/v5 target does — rather than database/sql:
// the store, the migrations and the retention run on a *pgxpool.Pool
// (LISTEN included, on a pool connection of its own), and a
// sqlstore.Writer or sqlstore.Inbox runs inside a pgx.Tx.
//
//	pool, err := pgxpool.New(ctx, dsn)
//	drv := pgxv5.New(pool)
//	err = sqlstore.Migrate(ctx, drv, sqlstore.Schema{Outbox: true})
//	store, err := sqlstore.NewStore(drv, sqlstore.StoreConfig{})
//	...
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// the business writes, through sqlc's queries.WithTx(tx), say
//		_, err := writer.Write(ctx, pgxv5.Executor(tx), rows)
//		return err
//	})
//
// Statements go through pgx's default query mode (prepared and cached per
// connection).
package pgxv5

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// DBTX is what pgx runs statements on: a pgx.Tx, a *pgxpool.Pool, a
// *pgxpool.Conn or a *pgx.Conn (sqlc's DBTX for pgx/v5 is this).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pool is a *pgxpool.Pool as the storage layer's driver: a sqlstore.DB and
// a sqlstore.Driver[pgx.Tx]. It is safe for concurrent use. For the
// executor of a pool or connection, use the free function [Executor].
type Pool struct {
	pool *pgxpool.Pool
}

// New wraps pool. A nil pool gives a nil *Pool, which the sqlstore
// functions refuse.
func New(pool *pgxpool.Pool) *Pool {
	if pool == nil {
		return nil
	}
	return &Pool{pool: pool}
}

// PgxPool returns the wrapped pool.
func (p *Pool) PgxPool() *pgxpool.Pool { return p.pool }

// Dialect implements sqlstore.DB: PostgreSQL.
func (p *Pool) Dialect() (sqlstore.Dialect, error) { return sqlstore.Postgres, nil }

// MaxConns implements sqlstore.DB: the pool's MaxConns.
func (p *Pool) MaxConns() int { return int(p.pool.Config().MaxConns) }

// UnwrapExecutor implements sqlstore.Driver: it is [Executor] of tx.
func (p *Pool) UnwrapExecutor(tx pgx.Tx) sqlstore.Executor { return Executor(tx) }

// UnwrapTx implements sqlstore.Driver: the pgx.Tx under a transaction
// that p or one of its Conns began, nil for any other.
func (p *Pool) UnwrapTx(_ context.Context, t sqlstore.Tx) pgx.Tx {
	if t, ok := t.(*tx); ok {
		return t.tx
	}
	return nil
}

// ExecContext implements sqlstore.Executor.
func (p *Pool) ExecContext(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	return execResult(p.pool.Exec(ctx, query, args...))
}

// QueryContext implements sqlstore.Executor.
func (p *Pool) QueryContext(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return queryRows(p.pool.Query(ctx, query, args...))
}

// QueryRowContext implements sqlstore.Executor.
func (p *Pool) QueryRowContext(ctx context.Context, query string, args ...any) sqlstore.RowScanner {
	return row{p.pool.QueryRow(ctx, query, args...)}
}

// BeginTx implements sqlstore.Beginner.
func (p *Pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (sqlstore.Tx, error) {
	o, err := txOptions(opts)
	if err != nil {
		return nil, err
	}
	return beginTx(p.pool.BeginTx(ctx, o))
}

// Conn implements sqlstore.DB: it acquires a pool connection.
func (p *Pool) Conn(ctx context.Context) (sqlstore.Conn, error) {
	c, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{exec: exec{c}, c: c}, nil
}

// Executor wraps tx, a pgx transaction, pool or connection, for a
// sqlstore.Writer or sqlstore.Inbox. The executor of a *pgxpool.Pool,
// *pgxpool.Conn or *pgx.Conn (not a transaction) can begin one: a Writer
// on MySQL would; on PostgreSQL it never needs to.
func Executor(tx DBTX) sqlstore.Executor {
	if b, ok := tx.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}); ok {
		if _, isTx := tx.(pgx.Tx); !isTx {
			return beginner{exec{tx}, b}
		}
	}
	return exec{tx}
}

// exec runs statements on a DBTX.
type exec struct{ q DBTX }

func (e exec) ExecContext(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	return execResult(e.q.Exec(ctx, query, args...))
}

func (e exec) QueryContext(ctx context.Context, q string, args ...any) (sqlstore.Rows, error) {
	return queryRows(e.q.Query(ctx, q, args...))
}

func (e exec) QueryRowContext(ctx context.Context, query string, args ...any) sqlstore.RowScanner {
	return row{e.q.QueryRow(ctx, query, args...)}
}

// beginner is an exec outside a transaction.
type beginner struct {
	exec
	b interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}
}

func (e beginner) BeginTx(ctx context.Context, opts *sql.TxOptions) (sqlstore.Tx, error) {
	o, err := txOptions(opts)
	if err != nil {
		return nil, err
	}
	return beginTx(e.b.BeginTx(ctx, o))
}

// txOptions maps database/sql's options to pgx's.
func txOptions(opts *sql.TxOptions) (pgx.TxOptions, error) {
	var o pgx.TxOptions
	if opts == nil {
		return o, nil
	}
	switch opts.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		o.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable, sql.LevelLinearizable:
		o.IsoLevel = pgx.Serializable
	default:
		return o, fmt.Errorf("pgxv5: isolation level %v: %w", opts.Isolation, errors.ErrUnsupported)
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o, nil
}

// result is a command tag as a sqlstore.Result.
type result struct{ tag pgconn.CommandTag }

func (r result) RowsAffected() (int64, error) { return r.tag.RowsAffected(), nil }

func execResult(tag pgconn.CommandTag, err error) (sqlstore.Result, error) {
	if err != nil {
		return nil, err
	}
	return result{tag}, nil
}

// rows is pgx.Rows as sqlstore.Rows.
type rows struct{ r pgx.Rows }

func queryRows(r pgx.Rows, err error) (sqlstore.Rows, error) {
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

func (r rows) Next() bool             { return r.r.Next() }
func (r rows) Scan(dest ...any) error { return r.r.Scan(dest...) }
func (r rows) Err() error             { return r.r.Err() }

func (r rows) Close() error {
	r.r.Close()
	return r.r.Err()
}

// row is pgx.Row as sqlstore.RowScanner; no row is sql.ErrNoRows.
type row struct{ r pgx.Row }

func (r row) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", sql.ErrNoRows, err)
	}
	return err
}

// tx is a pgx.Tx.
type tx struct {
	exec
	tx pgx.Tx
}

func beginTx(t pgx.Tx, err error) (sqlstore.Tx, error) {
	if err != nil {
		return nil, err
	}
	return &tx{exec: exec{t}, tx: t}, nil
}

func (t *tx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// Rollback rolls back even when ctx is done: pgx would close the
// connection rather than send a ROLLBACK on a done context.
func (t *tx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(context.WithoutCancel(ctx))
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil // after Commit, as database/sql's is
	}
	return err
}

// discardTimeout bounds the goodbye a discarded connection sends.
const discardTimeout = time.Second

// conn is a pool connection.
type conn struct {
	exec
	c *pgxpool.Conn
}

func (c *conn) BeginTx(ctx context.Context, opts *sql.TxOptions) (sqlstore.Tx, error) {
	o, err := txOptions(opts)
	if err != nil {
		return nil, err
	}
	return beginTx(c.c.BeginTx(ctx, o))
}

func (c *conn) PingContext(ctx context.Context) error { return c.c.Ping(ctx) }

// Close hands the connection back to the pool (which destroys it if it
// is closed or left in a transaction).
func (c *conn) Close() error {
	c.c.Release()
	return nil
}

// Discard closes the connection; the pool then destroys it.
func (c *conn) Discard() {
	pc := c.c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	_ = pc.Close(ctx)
}

// Key is pgx's connection, the same on each acquire of it.
func (c *conn) Key() any { return c.c.Conn() }

// Listen implements sqlstore.Listener.
func (c *conn) Listen(ctx context.Context, channel string) error {
	_, err := c.c.Exec(ctx, "LISTEN "+channel)
	return err
}

// WaitForNotification implements sqlstore.Listener.
func (c *conn) WaitForNotification(ctx context.Context) error {
	_, err := c.c.Conn().WaitForNotification(ctx)
	return err
}

// IsClosed implements sqlstore.Listener.
func (c *conn) IsClosed() bool { return c.c.Conn().IsClosed() }

var (
	_ sqlstore.Driver[pgx.Tx] = (*Pool)(nil)
	_ sqlstore.Listener       = (*conn)(nil)
)
