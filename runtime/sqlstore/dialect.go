package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Dialect is one of the databases the storage layer has SQL for.
type Dialect string

// The supported dialects. Their values are GORM's dialector names.
const (
	// Postgres is PostgreSQL, through pgx's database/sql driver
	// (github.com/jackc/pgx/v5/stdlib, driver name "pgx"); LISTEN/NOTIFY
	// and the fast paths need pgx. lib/pq works for the rest.
	Postgres Dialect = "postgres"
	// MySQL is MySQL 8 or MariaDB 10.6+ (InnoDB) through
	// github.com/go-sql-driver/mysql, with parseTime=true and the default
	// loc (UTC).
	MySQL Dialect = "mysql"
	// SQLite is SQLite through any of the usual drivers
	// (github.com/glebarez/go-sqlite, modernc.org/sqlite,
	// github.com/mattn/go-sqlite3).
	SQLite Dialect = "sqlite"
)

// ParseDialect returns the dialect of a GORM dialector name or a
// database/sql driver name: "postgres" or "pgx", "mysql", "sqlite" or
// "sqlite3". Other names return an error wrapping [ErrUnsupportedDialect].
func ParseDialect(name string) (Dialect, error) {
	switch name {
	case "postgres", "pgx":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	case "mysql":
		return MySQL, nil
	}
	return "", fmt.Errorf("%w: %q (supported: postgres, sqlite, mysql)", ErrUnsupportedDialect, name)
}

// driverPackages maps the package path of a database/sql driver type to
// its dialect. Paths are matched by prefix, so a driver's subpackages and
// major versions count.
var driverPackages = []struct {
	prefix  string
	dialect Dialect
}{
	{"github.com/jackc/pgx", Postgres},
	{"github.com/lib/pq", Postgres},
	{"github.com/go-sql-driver/mysql", MySQL},
	{"github.com/glebarez/go-sqlite", SQLite},
	{"github.com/glebarez/sqlite", SQLite},
	{"modernc.org/sqlite", SQLite},
	{"github.com/mattn/go-sqlite3", SQLite},
	{"github.com/ncruces/go-sqlite3", SQLite},
}

// DialectOf returns the dialect of db from its driver's Go type: pgx's
// stdlib driver and lib/pq are [Postgres], go-sql-driver/mysql is [MySQL],
// and the glebarez, modernc and mattn SQLite drivers are [SQLite]. Another
// driver (a wrapper that instruments a driver, say) returns an error
// wrapping [ErrUnsupportedDialect]: then name the dialect yourself
// ([StoreConfig.Dialect], [ParseDialect]).
func DialectOf(db *sql.DB) (Dialect, error) {
	if db == nil {
		return "", errNilDB
	}
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := ""
	if t != nil {
		pkg = t.PkgPath()
	}
	for _, d := range driverPackages {
		if pkg == d.prefix || strings.HasPrefix(pkg, d.prefix+"/") {
			return d.dialect, nil
		}
	}
	return "", fmt.Errorf("%w: cannot tell the dialect of driver %T; name it", ErrUnsupportedDialect, db.Driver())
}

// dialect is everything that differs between the supported databases: each
// database's SQL lives in its own file (dialect_postgres.go,
// dialect_sqlite.go, dialect_mysql.go), behind this one interface, and the
// [Writer] and the [Store] are written once against it (the [Inbox]'s few
// statements switch on [Dialect]).
type dialect interface {
	// name is the dialect's name.
	name() Dialect
	// ph returns the n-th (1-based) bind placeholder.
	ph(n int) string

	// ddl returns the idempotent statements that create the outbox table
	// (a valid name), its indexes and the tables beside it.
	ddl(table string) []string
	// migrateLock is a statement that serialises concurrent Migrate runs
	// inside their transaction, or "".
	migrateLock(table string) string

	// write inserts rows into table through q (the business transaction's
	// connection, or a pool), skipping event ids that already have a row,
	// and reports which ids it inserted. It keeps each aggregate's ids in
	// commit order (see "Commit order" in the package documentation),
	// unless orderLocks is false (benchmarks that measure what that costs).
	write(ctx context.Context, q Executor, table string, rows []Row, orderLocks bool) (map[uuid.UUID]bool, error)

	// leaseTx is the isolation of the lease bookkeeping transaction.
	leaseTx() *sql.TxOptions
	// guardLeaseTx makes the database end the lease transaction tx, and
	// release its locks, if the client stops in the middle of it for longer
	// than limit (a relay SIGSTOPped or hung mid-transaction would otherwise
	// hold the lease rows, and so every other relay's takeover, for as long
	// as its connection lives). A dialect that cannot leaves it to the
	// server's own timeouts. A non-nil restore undoes what the guard set
	// on the session; it runs after the commit, on the transaction's
	// connection, so that the guard also covers a client that stops while
	// its COMMIT is on the way (the server would otherwise keep the
	// transaction, and its locks, open for as long as the session lives).
	guardLeaseTx(ctx context.Context, tx Tx, limit time.Duration) (restore func(context.Context, Conn) error, err error)
	// leases returns the lease bookkeeping of a store's tables.
	leases(t storeTables) leaseOps

	// claimQuery returns the SELECT of the claimable rows (selectColumns and
	// the number of relays alive, in id order) of the store's table: pending, not parked, of an aggregate
	// with no waiting or parked row, at most limit rows whose payloads
	// before each add up to less than maxBytes. filter is "" or conditions
	// such as " AND o.shard IN (...)", for the table aliased o; its
	// placeholders, if any, follow the query's own (see excludeIDs).
	claimQuery(t storeTables, filter string, limit int, maxBytes int64) (string, []any)
	// excludeIDs returns the condition, for the table aliased o, that
	// leaves out the rows of ids (non-empty), and its arguments, whose
	// placeholders are numbered from next.
	excludeIDs(ids []int64, next int) (string, []any)
	// publishedSet is the SET clause (with its arguments) that marks rows
	// published, on the clock retention compares with.
	publishedSet() (string, []any)
	// updateFenced runs "UPDATE table SET set" on the pending rows of ids in
	// the shards that owner holds; set's placeholders come first. An empty
	// set deletes those rows instead (StoreConfig.DeletePublished). A
	// non-nil events bounds the rows' event ids too (the event ids of the
	// ids' rows lie within it), so that on a partitioned table the update
	// reads only the partitions that can hold them.
	updateFenced(ctx context.Context, db Executor, t storeTables, owner, set string, setArgs []any, ids []int64, events *eventRange) error
	// failureSet returns the SET clause (and its arguments, numbered from
	// 1) that records a failure of kind with the error text.
	failureSet(kind failureKind, text string, cfg StoreConfig) (string, []any)
	// deletePublished deletes at most batch rows published before now
	// minus olderThan, oldest first, in one short transaction that waits
	// for no row lock (rows another transaction holds are left for the
	// next batch) and never deletes a row that a concurrent
	// [Store.Replay] made pending; it returns how many it deleted. A
	// positive maxID also bounds the rows' ids.
	deletePublished(ctx context.Context, db DB, t storeTables, olderThan time.Duration, batch int, maxID int64) (int64, error)
	// pendingAge is the expression of the age, in seconds, of the oldest
	// created_at of "SELECT min(created_at) " + from, or 0.
	pendingAge(from string) string
	// secondsSince is the expression of the seconds from the timestamp
	// expression expr to now, on the clock that wrote it (NULL for NULL).
	secondsSince(expr string) string
	// timeCompare is the condition "col op ?" on a timestamp column, for a
	// parameter made by timeArg.
	timeCompare(col, op string) string
	// timeArg is the parameter of a time for timeCompare.
	timeArg(t time.Time) any
	// listen waits for inserts (see [Store.Listen]).
	listen(ctx context.Context, s *Store, notify func()) error
	// wakeSQL returns the statement that asks writers to notify for the
	// next $1 milliseconds (extending, never shortening, a request), the
	// one (no argument) that ends the request, or "" for a dialect whose
	// writers send no notifications.
	wakeSQL(t storeTables) (request, cancel string)
}

// smallClaimer is implemented by a dialect that can read a claim without
// adding its payload sizes up row by row (see Store.selectClaimable).
type smallClaimer interface {
	// claimSmallQuery returns the SELECT of the claimable rows, as
	// claimQuery does, of the first limit claimable rows, with NULL for
	// a payload larger than small bytes. window says the claim may read
	// the first claimable rows as a range (see Store.selectClaimable);
	// a dialect without such a read ignores it.
	claimSmallQuery(t storeTables, filter string, limit int, small int64, window bool) (string, []any)
}

// idList is a comma-separated list of ids, safe to splice into SQL.
func idList(ids []int64) string {
	b := make([]byte, 0, len(ids)*8)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(b)
}

// sqlOf returns the SQL of dialect d.
func sqlOf(d Dialect) (dialect, error) {
	switch d {
	case Postgres:
		return postgresDialect{}, nil
	case SQLite:
		return sqliteDialect{}, nil
	case MySQL:
		return mysqlDialect{}, nil
	}
	return nil, fmt.Errorf("%w: %q (supported: postgres, sqlite, mysql)", ErrUnsupportedDialect, string(d))
}

// storeTables names a store's tables.
type storeTables struct {
	table, leases, relays, wake string
	// queue is the queue of pending rows of a plain PostgreSQL table
	// (see queueDDL), or "" where pending rows are those with
	// published_at NULL.
	queue string
}

// tablesOf returns the names of the tables of the outbox table.
func tablesOf(table string) storeTables {
	return storeTables{table: table, leases: leasesTable(table), relays: relaysTable(table), wake: wakeSequence(table)}
}

// leaseOps is the lease bookkeeping of [Store.renew], run in one transaction
// (tx), and of [Store.Release] (q, a pool or a transaction).
type leaseOps interface {
	// register marks owner alive until now + ttl.
	// register records owner alive until now+ttl, and whether it holds its
	// session lock (see sessionLocker), which lets the other relays take
	// its shards over once they find the lock free, without having seen it
	// held.
	register(ctx context.Context, tx Tx, owner string, now time.Time, ttl time.Duration, locked bool) error
	// alive counts the relays alive.
	alive(ctx context.Context, tx Tx, now time.Time) (int, error)
	// othersAlive counts the relays alive other than owner.
	othersAlive(ctx context.Context, q Executor, owner string, now time.Time) (int, error)
	// renew extends owner's leases to now + ttl and returns their shards.
	renew(ctx context.Context, tx Tx, owner string, now time.Time, ttl time.Duration) ([]int16, error)
	// release gives back owner's shards: all of them when shards is nil.
	release(ctx context.Context, q Executor, owner string, shards []int16) error
	// acquire takes up to n free or expired shards for owner, skipping
	// those another relay's transaction holds, and returns them.
	acquire(ctx context.Context, tx Tx, owner string, now time.Time, ttl time.Duration, n int) ([]int16, error)
	// holders counts the unexpired leases of each relay other than owner
	// that holds some.
	holders(ctx context.Context, tx Tx, owner string, now time.Time) (map[string]int, error)
	// free counts the shards nobody holds: never taken, released, or
	// expired.
	free(ctx context.Context, q Executor, now time.Time) (int, error)
	// forget unregisters relays dead for an hour, and unregister one that
	// stopped.
	forget(ctx context.Context, tx Tx, now time.Time) error
	unregister(ctx context.Context, q Executor, owner string) error
}

// insertArgs returns the ten arguments of rows' insertColumns, row by row.
func insertArgs(rows []Row) ([]any, error) {
	args := make([]any, 0, 10*len(rows))
	for _, r := range rows {
		env := &r.Envelope
		var headers any
		if len(env.Headers) > 0 {
			h, err := EncodeHeaders(env.Headers)
			if err != nil {
				return nil, fmt.Errorf("event %s: %w", env.EventID, err)
			}
			headers = h
		}
		args = append(args, env.EventID.String(), env.EventType, env.EventVersion,
			env.AggregateType, env.AggregateID, r.Topic, string(env.Payload), headers,
			env.OccurredAt, ShardOf(env.AggregateType, env.AggregateID))
	}
	return args, nil
}

// valuesList is "(?, ..., ?), ..." for n rows of width placeholders.
func valuesList(n, width int) string {
	row := "(?" + strings.Repeat(", ?", width-1) + ")"
	return row + strings.Repeat(", "+row, n-1)
}

// scanEventIDs reads a column of event ids into inserted.
func scanEventIDs(rows Rows, err error, inserted map[uuid.UUID]bool) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return fmt.Errorf("scan event id: %w", err)
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return fmt.Errorf("event id %q: %w", s, err)
		}
		inserted[id] = true
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}

// eventRange is the smallest and the largest of some event ids.
type eventRange struct{ lo, hi string }

// updateFencedIn is updateFenced with "?" placeholders and IN lists of at
// most 500 ids, for the dialects that have no array parameters.
func updateFencedIn(ctx context.Context, db Executor, t storeTables, owner, set string, setArgs []any, ids []int64) error {
	const chunk = 500
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		args := append([]any(nil), setArgs...)
		for _, id := range part {
			args = append(args, id)
		}
		args = append(args, owner)
		q := `UPDATE ` + t.table + ` SET ` + set
		if set == "" {
			q = `DELETE FROM ` + t.table
		}
		q += ` WHERE id IN (?` + strings.Repeat(", ?", len(part)-1) + `)
			AND published_at IS NULL AND shard IN (SELECT shard FROM ` + t.leases + ` WHERE owner = ?)`
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// returningLeases is the lease bookkeeping of the databases that have
// UPDATE ... RETURNING: one statement per step. The statements' arguments:
// register (until..., owner), alive (now...), others (now..., owner),
// renew (until..., owner),
// release (owner), acquire (until..., owner, now..., count), holders
// (now..., owner), free (now...), forget (now...).
type returningLeases struct {
	registerQ, aliveQ, othersQ, renewQ, releaseQ, acquireQ, holdersQ, freeQ, forgetQ, unregisterQ string
	// lockColumn: registerQ takes a third parameter, the session_lock
	// column of the relays table (dialects with a session lock).
	lockColumn bool
	// clock returns the now and now-plus-ttl arguments: none and the ttl
	// in microseconds on a database that uses its own clock.
	clock func(now time.Time, ttl time.Duration) (nowArgs, untilArgs []any)
}

func (l returningLeases) register(ctx context.Context, tx Tx, owner string, now time.Time, ttl time.Duration, locked bool) error {
	_, until := l.clock(now, ttl)
	args := append(until, owner)
	if l.lockColumn {
		args = append(args, locked)
	}
	_, err := tx.ExecContext(ctx, l.registerQ, args...)
	return err
}

func (l returningLeases) alive(ctx context.Context, tx Tx, now time.Time) (int, error) {
	n, _ := l.clock(now, 0)
	var alive int
	err := tx.QueryRowContext(ctx, l.aliveQ, n...).Scan(&alive)
	return alive, err
}

func (l returningLeases) othersAlive(ctx context.Context, q Executor, owner string, now time.Time) (int, error) {
	n, _ := l.clock(now, 0)
	var alive int
	err := q.QueryRowContext(ctx, l.othersQ, append(n, owner)...).Scan(&alive)
	return alive, err
}

func (l returningLeases) renew(ctx context.Context, tx Tx, owner string, now time.Time, ttl time.Duration) ([]int16, error) {
	_, until := l.clock(now, ttl)
	return scanShards(tx.QueryContext(ctx, l.renewQ, append(until, owner)...))
}

func (l returningLeases) release(ctx context.Context, q Executor, owner string, shards []int16) error {
	stmt := l.releaseQ
	if shards != nil {
		stmt += " AND shard IN (" + shardList(shards) + ")"
	}
	_, err := q.ExecContext(ctx, stmt, owner)
	return err
}

func (l returningLeases) acquire(ctx context.Context, tx Tx, owner string, now time.Time, ttl time.Duration, n int) ([]int16, error) {
	nowArgs, until := l.clock(now, ttl)
	return scanShards(tx.QueryContext(ctx, l.acquireQ, append(append(until, owner), append(nowArgs, n)...)...))
}

func (l returningLeases) holders(ctx context.Context, tx Tx, owner string, now time.Time) (map[string]int, error) {
	n, _ := l.clock(now, 0)
	return scanHolders(tx.QueryContext(ctx, l.holdersQ, append(n, owner)...))
}

func (l returningLeases) free(ctx context.Context, q Executor, now time.Time) (int, error) {
	n, _ := l.clock(now, 0)
	var free int
	err := q.QueryRowContext(ctx, l.freeQ, n...).Scan(&free)
	return free, err
}

func (l returningLeases) forget(ctx context.Context, tx Tx, now time.Time) error {
	n, _ := l.clock(now, 0)
	_, err := tx.ExecContext(ctx, l.forgetQ, n...)
	return err
}

func (l returningLeases) unregister(ctx context.Context, q Executor, owner string) error {
	_, err := q.ExecContext(ctx, l.unregisterQ, owner)
	return err
}
