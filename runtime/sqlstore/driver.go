package sqlstore

import (
	"context"
	"database/sql"
)

// The driver seam. Everything in this package reaches the database through
// the interfaces below, never through a database library's own types, so
// one storage layer runs on any of them. Two drivers implement them:
//
//   - package [github.com/gooutbox/outbox/runtime/sqlstore/databasesql]: a
//     *sql.DB and the transactions and connections of database/sql
//     (PostgreSQL through pgx's stdlib driver or lib/pq, MySQL/MariaDB,
//     SQLite), and anything shaped like them, as GORM's connection pools are
//     (package hooks builds its GORM binding on it);
//   - package [github.com/gooutbox/outbox/runtime/sqlstore/pgxv5]: a
//     *pgxpool.Pool and pgx.Tx, natively (PostgreSQL).
//
// A driver is a [DB] (the pool the [Store], the migrations and the
// retention run their own statements on) that also turns its users'
// transactions into an [Executor] ([Driver.UnwrapExecutor]), which is how
// a [Writer] writes inside the business transaction and an [Inbox] records
// inside the handler's, and turns a [Tx] it began back into its users'
// transaction type ([Driver.UnwrapTx]), which is how a consumer that
// begins the inbox transaction hands it to a handler. The conformance suite
// (runtime/runtimetest.TestStore) runs the store through each driver.

// Executor runs statements: a transaction, a connection or a pool, wrapped
// by a driver. Placeholders are the dialect's ($1 on PostgreSQL, ? on
// MySQL and SQLite): the package writes them.
type Executor interface {
	// ExecContext runs a statement that returns no rows.
	ExecContext(ctx context.Context, query string, args ...any) (Result, error)
	// QueryContext runs a query; the caller closes the rows.
	QueryContext(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRowContext runs a query expected to return at most one row; its
	// Scan returns an error matching sql.ErrNoRows (errors.Is) when there
	// is none.
	QueryRowContext(ctx context.Context, query string, args ...any) RowScanner
}

// Result is the outcome of [Executor.ExecContext] (sql.Result has it).
type Result interface {
	// RowsAffected is the number of rows the statement changed.
	RowsAffected() (int64, error)
}

// Rows is the result of a query (*sql.Rows has these methods). Scan
// accepts the destinations database/sql does: pointers to Go values and
// sql.Scanner implementations such as sql.NullString.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// RowScanner is the result of [Executor.QueryRowContext] (*sql.Row has
// it).
type RowScanner interface {
	Scan(dest ...any) error
}

// Tx is a transaction a [DB] or a [Conn] began.
type Tx interface {
	Executor
	// Commit commits the transaction.
	Commit(ctx context.Context) error
	// Rollback rolls it back; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

// Beginner begins transactions. opts may be nil (the database's default
// isolation); the package asks for sql.LevelReadCommitted on MySQL only.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (Tx, error)
}

// Conn is one session taken from a [DB]'s pool, held until Close or
// Discard: the store runs its lease, claim and mark statements on one, and
// holds a relay's session lock on one.
type Conn interface {
	Executor
	Beginner
	// PingContext checks that the session still answers.
	PingContext(ctx context.Context) error
	// Close hands the session back to the pool.
	Close() error
	// Discard closes the session and keeps the pool from handing it out
	// again: its call timed out (it may be half-open), or it holds a
	// session lock or session settings.
	Discard()
	// Key identifies the underlying session for as long as it lives, the
	// same on each take of it from the pool; nil if the driver cannot
	// tell.
	Key() any
}

// Listener is implemented by the [Conn] of a driver that can wait for
// PostgreSQL notifications (pgx, natively or through database/sql). A
// Conn without it makes [Store.Listen] return an error wrapping
// errors.ErrUnsupported: the relay then polls.
type Listener interface {
	// Listen subscribes the session to channel (a quoted identifier).
	Listen(ctx context.Context, channel string) error
	// WaitForNotification waits for the next notification, until ctx ends.
	WaitForNotification(ctx context.Context) error
	// IsClosed reports whether the session is closed.
	IsClosed() bool
}

// DB is a database the storage layer runs its own statements on: a pool of
// sessions, as a driver wraps it.
type DB interface {
	Executor
	Beginner
	// Conn takes a session from the pool.
	Conn(ctx context.Context) (Conn, error)
	// MaxConns is the pool's limit on open sessions, 0 if it has none.
	MaxConns() int
	// Dialect is the database's dialect, as far as the driver can tell
	// (an error wrapping [ErrUnsupportedDialect] when it cannot: then
	// name it in the config).
	Dialect() (Dialect, error)
}

// Driver is a [DB] that also wraps its users' transactions, of type TTx,
// as executors: *sql.Tx and the like for database/sql, pgx.Tx for pgx, a
// GORM transaction for package hooks.
type Driver[TTx any] interface {
	DB
	// UnwrapExecutor returns an executor that runs statements in tx.
	UnwrapExecutor(tx TTx) Executor
	// UnwrapTx returns the driver's own transaction under tx, for
	// handlers that take the driver's transaction type: tx must have been
	// begun by this driver (its BeginTx, or the BeginTx of one of its
	// Conns); ctx is the context statements through the result run under
	// where the transaction type carries one (GORM's). For a tx of another
	// driver it returns the zero TTx.
	UnwrapTx(ctx context.Context, tx Tx) TTx
}

// txBeginner is an [Executor] outside any transaction (a pool or a
// session, not a transaction) that can begin one: a [Writer] on MySQL
// begins its own when handed one (its commit-order lock needs a
// transaction). Drivers implement it on the executors of pools and
// sessions, and not on those of transactions.
type txBeginner interface {
	Executor
	Beginner
}
