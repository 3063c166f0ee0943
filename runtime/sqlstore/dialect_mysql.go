package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// mysqlDialect is MySQL 8 and MariaDB 10.6+ (InnoDB), through
// github.com/go-sql-driver/mysql with parseTime=true and the default loc
// (UTC). What it does without what PostgreSQL has:
//
//   - No RETURNING on every version, no ON CONFLICT: an insert is a plain
//     multi-row INSERT; when it hits a duplicate event id (error 1062, the
//     statement is undone, the transaction goes on) the rows are inserted
//     one by one, and those that fail with 1062 are the ones not inserted.
//     A first save, the common case, is one statement.
//   - No transaction-scoped advisory lock (GET_LOCK is held by the session,
//     past the commit): the commit-order lock is a row lock on a small lock
//     table (<table>_locks, one row per hash slot of the aggregate, made on
//     first use), taken by INSERT ... ON DUPLICATE KEY UPDATE in slot order
//     before the outbox rows get their ids, and held until the transaction
//     ends. An insert outside a transaction runs in one of its own so that
//     the lock covers the rows' commit.
//   - No partial indexes: the pending index is (published_at, parked_at,
//     id), whose NULL, NULL prefix is the pending rows in id order (and
//     NULL, NOT NULL the parked ones); the blocked index stands in for
//     PostgreSQL's partial one through a virtual column, blocked, that is 1
//     on the unpublished rows that failed or are parked and NULL on every
//     other row, indexed as (blocked, aggregate_type, aggregate_id): the
//     claim's blocked set reads only the failed rows (on MariaDB 10.11,
//     200,000 rows of which 20,000 pending and 20 waiting, a claim of 1,000
//     took about 15ms against 35ms with an index on (aggregate_type,
//     aggregate_id, published_at, ...), whose NULL prefix is every pending
//     row).
//   - No UPDATE ... RETURNING: leases are selected FOR UPDATE SKIP LOCKED,
//     then updated, in a READ COMMITTED transaction (so scanning the lease
//     table locks only the rows taken).
//   - Times are DATETIME(6) in UTC, on the database's clock
//     (UTC_TIMESTAMP(6)).
type mysqlDialect struct{}

func (mysqlDialect) name() Dialect { return MySQL }
func (mysqlDialect) ph(int) string { return "?" }

// lockSlots is the number of rows the commit-order lock table can hold:
// aggregates whose hashes share a slot wait for each other's commits.
const lockSlots = 1 << 16

// locksTable names the commit-order lock table.
func locksTable(table string) string { return qualify(table, baseName(table)+"_locks") }

func (mysqlDialect) ddl(table string) []string {
	base := baseName(table)
	const opts = ` ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	event_id        CHAR(36) CHARACTER SET ascii NOT NULL,
	event_type      VARCHAR(255) NOT NULL,
	event_version   INT          NOT NULL,
	aggregate_type  VARCHAR(255) NOT NULL,
	aggregate_id    VARCHAR(255) NOT NULL,
	shard           SMALLINT     NOT NULL DEFAULT 0,
	topic           VARCHAR(255) NOT NULL,
	payload         LONGTEXT     NOT NULL,
	headers         MEDIUMTEXT,
	occurred_at     DATETIME(6)  NOT NULL,
	created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
	published_at    DATETIME(6),
	attempts        INT          NOT NULL DEFAULT 0,
	last_error      MEDIUMTEXT,
	next_attempt_at DATETIME(6),
	parked_at       DATETIME(6),
	blocked         TINYINT AS (CASE WHEN published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) THEN 1 END) VIRTUAL,
	UNIQUE KEY ` + base + `_event_id (event_id),
	KEY ` + base + `_pending (published_at, parked_at, id),
	KEY ` + base + `_blocked (blocked, aggregate_type, aggregate_id)
)` + opts,
		`CREATE TABLE IF NOT EXISTS ` + leasesTable(table) + ` (
	shard      SMALLINT NOT NULL PRIMARY KEY,
	owner      VARCHAR(255),
	expires_at DATETIME(6)
)` + opts,
		seedLeases(table, "ON DUPLICATE KEY UPDATE shard = shard"),
		`CREATE TABLE IF NOT EXISTS ` + relaysTable(table) + ` (
	owner      VARCHAR(255) NOT NULL PRIMARY KEY,
	expires_at DATETIME(6)  NOT NULL
)` + opts,
		// session_lock says that the relay holds its session lock (see
		// sessionLocker). MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB
		// has), and PREPARE is refused over the prepared-statement
		// protocol (GORM's PrepareStmt): MigrateOutboxTx ignores the
		// duplicate-column error of a table that has it already.
		mysqlAddSessionLock(table),
		`CREATE TABLE IF NOT EXISTS ` + locksTable(table) + ` (
	slot INT NOT NULL PRIMARY KEY
)` + opts,
	}
}

func (mysqlDialect) migrateLock(string) string { return "" }

// mysqlAddSessionLock is the statement that adds the session_lock column
// to table's relays table; see ignorableDDLError.
func mysqlAddSessionLock(table string) string {
	return `ALTER TABLE ` + relaysTable(table) + ` ADD COLUMN session_lock BOOLEAN NOT NULL DEFAULT FALSE`
}

// ignorableDDLError reports whether err, from statement stmt of the DDL,
// says that stmt has been applied already: MySQL's ER_DUP_FIELDNAME for
// the ADD COLUMN of an earlier migration.
func ignorableDDLError(stmt string, err error) bool {
	n, ok := mysqlErrorNumber(err)
	return ok && n == 1060 && strings.Contains(stmt, " ADD COLUMN ")
}

// write inserts rows; see mysqlDialect for how. Outside a transaction (q
// is a [Beginner]) it begins one on q, so that the
// commit-order lock covers the rows' commit.
func (d mysqlDialect) write(ctx context.Context, conn Executor, table string, rows []Row, orderLocks bool) (map[uuid.UUID]bool, error) {
	b, outsideTx := conn.(Beginner)
	if !outsideTx || !orderLocks || !slices.ContainsFunc(rows, needsOrderLock) {
		return d.writeTx(ctx, conn, table, rows, orderLocks)
	}
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("insert into %s: a transaction for the commit-order lock: %w", table, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	inserted, err := d.writeTx(ctx, tx, table, rows, true)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("insert into %s: commit: %w", table, err)
	}
	return inserted, nil
}

func (mysqlDialect) writeTx(ctx context.Context, conn Executor, table string, rows []Row, orderLocks bool) (map[uuid.UUID]bool, error) {
	inserted := make(map[uuid.UUID]bool, len(rows))
	for start := 0; start < len(rows); start += maxRowsPerInsert {
		chunk := rows[start:min(start+maxRowsPerInsert, len(rows))]
		if orderLocks && slices.ContainsFunc(chunk, needsOrderLock) {
			if _, err := conn.ExecContext(ctx, lockSlotsSQL(table, chunk)); err != nil {
				return nil, fmt.Errorf("insert into %s: commit-order lock: %w", table, err)
			}
		}
		args, err := insertArgs(chunk)
		if err != nil {
			return nil, err
		}
		q := "INSERT INTO " + table + " (" + insertColumns + ") VALUES "
		_, err = conn.ExecContext(ctx, q+valuesList(len(chunk), 10), args...)
		if err == nil {
			for _, r := range chunk {
				inserted[r.Envelope.EventID] = true
			}
			continue
		}
		if !isDuplicateKey(err) {
			return nil, fmt.Errorf("insert into %s: %w", table, err)
		}
		// Some event ids have rows already (the statement was undone):
		// insert row by row, and leave out those that fail the same way.
		one := q + valuesList(1, 10)
		for i, r := range chunk {
			_, err := conn.ExecContext(ctx, one, args[10*i:10*i+10]...)
			switch {
			case err == nil:
				inserted[r.Envelope.EventID] = true
			case !isDuplicateKey(err):
				return nil, fmt.Errorf("insert into %s: %w", table, err)
			}
		}
	}
	return inserted, nil
}

// lockSlotsSQL locks the commit-order slots of the aggregates of rows that
// need one (at least one must), in slot order, creating the slots' rows on
// first use. The slots are numbers, spliced into the statement so that it
// needs no prepared statement.
func lockSlotsSQL(table string, rows []Row) string {
	slots := make([]int, 0, len(rows))
	for _, r := range rows {
		if needsOrderLock(r) {
			slots = append(slots, int(aggregateHash(r.Envelope.AggregateType, r.Envelope.AggregateID)%lockSlots))
		}
	}
	slices.Sort(slots)
	slots = slices.Compact(slots)
	var b strings.Builder
	b.WriteString("INSERT INTO " + locksTable(table) + " (slot) VALUES ")
	for i, s := range slots {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + strconv.Itoa(s) + ")")
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE slot = slot")
	return b.String()
}

// isDuplicateKey reports whether err is MySQL's ER_DUP_ENTRY.
func isDuplicateKey(err error) bool {
	n, ok := mysqlErrorNumber(err)
	return ok && n == 1062
}

// mysqlErrorNumber returns the error number of the first
// *github.com/go-sql-driver/mysql.MySQLError in err's tree. It knows the
// type by its package path and name, as DialectOf knows the drivers, so
// that a program that uses PostgreSQL or SQLite links no MySQL driver.
func mysqlErrorNumber(err error) (uint16, bool) {
	for _, e := range errorTree(err) {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
			continue
		}
		typ := v.Elem().Type()
		if typ.Name() != "MySQLError" || typ.PkgPath() != "github.com/go-sql-driver/mysql" {
			continue
		}
		if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
			return uint16(f.Uint()), true
		}
	}
	return 0, false
}

// errorTree returns err and the errors it wraps, depth first, as errors.As
// visits them.
func errorTree(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		out = append(out, e)
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				walk(w)
			}
		}
	}
	walk(err)
	return out
}

// leaseTx is READ COMMITTED, so that the scans of the lease table lock only
// the rows they take or change.
func (mysqlDialect) leaseTx() *sql.TxOptions {
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

func (mysqlDialect) leases(t storeTables) leaseOps { return mysqlLeases{t} }

// mysqlLeases is the lease bookkeeping without UPDATE ... RETURNING.
type mysqlLeases struct{ t storeTables }

const mysqlUntil = "DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)"

func (l mysqlLeases) register(ctx context.Context, tx Tx, owner string, _ time.Time, ttl time.Duration, locked bool) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+l.t.relays+` (owner, expires_at, session_lock) VALUES (?, `+mysqlUntil+`, ?)
		ON DUPLICATE KEY UPDATE expires_at = `+mysqlUntil+`, session_lock = VALUES(session_lock)`, owner, ttl.Microseconds(), locked, ttl.Microseconds())
	return err
}

func (l mysqlLeases) alive(ctx context.Context, tx Tx, _ time.Time) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+l.t.relays+` WHERE expires_at > UTC_TIMESTAMP(6)`).Scan(&n)
	return n, err
}

func (l mysqlLeases) othersAlive(ctx context.Context, q Executor, owner string, _ time.Time) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+l.t.relays+` WHERE expires_at > UTC_TIMESTAMP(6) AND owner <> ?`, owner).Scan(&n)
	return n, err
}

func (l mysqlLeases) renew(ctx context.Context, tx Tx, owner string, _ time.Time, ttl time.Duration) ([]int16, error) {
	if _, err := tx.ExecContext(ctx, `UPDATE `+l.t.leases+` SET expires_at = `+mysqlUntil+` WHERE owner = ?`, ttl.Microseconds(), owner); err != nil {
		return nil, err
	}
	return scanShards(tx.QueryContext(ctx, `SELECT shard FROM `+l.t.leases+` WHERE owner = ?`, owner))
}

func (l mysqlLeases) release(ctx context.Context, q Executor, owner string, shards []int16) error {
	stmt := `UPDATE ` + l.t.leases + ` SET owner = NULL, expires_at = NULL WHERE owner = ?`
	if shards != nil {
		stmt += " AND shard IN (" + shardList(shards) + ")"
	}
	_, err := q.ExecContext(ctx, stmt, owner)
	return err
}

func (l mysqlLeases) acquire(ctx context.Context, tx Tx, owner string, _ time.Time, ttl time.Duration, n int) ([]int16, error) {
	free, err := scanShards(tx.QueryContext(ctx, `SELECT shard FROM `+l.t.leases+`
		WHERE owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)
		ORDER BY shard LIMIT `+strconv.Itoa(n)+` FOR UPDATE SKIP LOCKED`))
	if err != nil || len(free) == 0 {
		return nil, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE `+l.t.leases+` SET owner = ?, expires_at = `+mysqlUntil+`
		WHERE shard IN (`+shardList(free)+`)`, owner, ttl.Microseconds())
	if err != nil {
		return nil, err
	}
	return free, nil
}

func (l mysqlLeases) holders(ctx context.Context, tx Tx, owner string, _ time.Time) (map[string]int, error) {
	return scanHolders(tx.QueryContext(ctx, `SELECT owner, COUNT(*) FROM `+l.t.leases+`
		WHERE owner IS NOT NULL AND owner <> ? AND expires_at > UTC_TIMESTAMP(6) GROUP BY owner`, owner))
}

func (l mysqlLeases) free(ctx context.Context, q Executor, _ time.Time) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+l.t.leases+` WHERE owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)`).Scan(&n)
	return n, err
}

// forget finds the dead relays with a read that locks nothing, then
// deletes them by key: a DELETE scanning the table would lock the rows of
// the live relays, which hold their own row since register, and deadlock
// with them.
func (l mysqlLeases) forget(ctx context.Context, tx Tx, _ time.Time) error {
	const dead = `expires_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL 1 HOUR)`
	rows, err := tx.QueryContext(ctx, `SELECT owner FROM `+l.t.relays+` WHERE `+dead)
	if err != nil {
		return err
	}
	var owners []any
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			rows.Close()
			return err
		}
		owners = append(owners, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(owners) == 0 {
		return err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM `+l.t.relays+` WHERE owner IN (?`+strings.Repeat(", ?", len(owners)-1)+`) AND `+dead, owners...)
	return err
}

func (l mysqlLeases) unregister(ctx context.Context, q Executor, owner string) error {
	_, err := q.ExecContext(ctx, `DELETE FROM `+l.t.relays+` WHERE owner = ?`, owner)
	return err
}

// claimQuery splices its numbers, so that the query runs without a
// prepared statement.
func (mysqlDialect) claimQuery(t storeTables, shardFilter string, limit int, maxBytes int64) (string, []any) {
	q := `SELECT ` + selectColumns + `, (SELECT COUNT(*) FROM ` + t.relays + ` WHERE expires_at > UTC_TIMESTAMP(6)) FROM (
			SELECT c.*, SUM(LENGTH(c.payload)) OVER (ORDER BY c.id) AS run FROM (
				SELECT ` + selectColumns + ` FROM ` + t.table + ` o
				WHERE o.published_at IS NULL AND o.parked_at IS NULL` + shardFilter + `
				AND NOT EXISTS (SELECT 1 FROM ` + t.table + ` b
					WHERE b.blocked = 1 AND b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id
					AND (b.parked_at IS NOT NULL OR b.next_attempt_at > UTC_TIMESTAMP(6)))
				ORDER BY o.id LIMIT ` + strconv.Itoa(limit) + `) c) x
		WHERE run - LENGTH(payload) < ` + strconv.FormatInt(maxBytes, 10) + ` ORDER BY id`
	return q, nil
}

// excludeIDs splices the ids (integers) into the statement.
func (mysqlDialect) excludeIDs(ids []int64, _ int) (string, []any) {
	return " AND o.id NOT IN (" + idList(ids) + ")", nil
}

func (mysqlDialect) publishedSet() (string, []any) { return "published_at = UTC_TIMESTAMP(6)", nil }

func (mysqlDialect) updateFenced(ctx context.Context, db Executor, t storeTables, owner, set string, setArgs []any, ids []int64, _ *eventRange) error {
	return updateFencedIn(ctx, db, t, owner, set, setArgs, ids)
}

// failureSet puts attempts last: MySQL assigns from left to right, and a
// later expression sees the earlier assignments.
func (mysqlDialect) failureSet(kind failureKind, text string, cfg StoreConfig) (string, []any) {
	delay, maxDelay := cfg.RetryDelay.Microseconds(), cfg.MaxRetryDelay.Microseconds()
	switch kind {
	case failPark:
		return `last_error = ?, parked_at = UTC_TIMESTAMP(6), attempts = attempts + 1`, []any{text}
	case failAttempt:
		return `last_error = ?,
			next_attempt_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL LEAST(? << LEAST(attempts, 30), ?) MICROSECOND),
			parked_at = CASE WHEN ? > 0 AND attempts + 1 >= ? THEN UTC_TIMESTAMP(6) END,
			attempts = attempts + 1`,
			[]any{text, delay, maxDelay, cfg.MaxAttempts, cfg.MaxAttempts}
	default:
		return `last_error = ?, next_attempt_at = ` + mysqlUntil, []any{text, delay}
	}
}

// deletePublished locks the batch's rows with SELECT ... FOR UPDATE SKIP
// LOCKED, then deletes them by primary key, in a READ COMMITTED
// transaction: InnoDB then locks only the rows that match, takes no gap
// locks (so writers' inserts never wait for it), and passes over the rows
// the relay is marking. A plain "DELETE ... ORDER BY id LIMIT n" under
// REPEATABLE READ would lock every row and gap it scans, pending rows
// included, for the length of the statement.
func (mysqlDialect) deletePublished(ctx context.Context, db DB, t storeTables, olderThan time.Duration, batch int, maxID int64) (int64, error) {
	const cutoff = `DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)`
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	ids, err := scanIDs(tx.QueryContext(ctx, `SELECT id FROM `+t.table+` WHERE published_at IS NOT NULL AND published_at < `+cutoff+`
		AND (? <= 0 OR id <= ?) ORDER BY id LIMIT `+strconv.Itoa(batch)+` FOR UPDATE SKIP LOCKED`, olderThan.Microseconds(), maxID, maxID))
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM `+t.table+` WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)
		AND published_at IS NOT NULL`, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

func (mysqlDialect) pendingAge(from string) string {
	return `COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(created_at) ` + from + `), UTC_TIMESTAMP(6)) / 1000000, 0)`
}

func (mysqlDialect) listen(context.Context, *Store, func()) error {
	return fmt.Errorf("sqlstore: listen: %w: LISTEN/NOTIFY needs PostgreSQL; the relay polls", errors.ErrUnsupported)
}

// guardLeaseTx sets the session's wait_timeout and innodb_lock_wait_timeout
// to limit (whole seconds, at least 1) for the lease transaction: the server
// then closes the session of a relay stalled inside it, which rolls the
// transaction back and releases the lease rows, instead of holding them
// until the default wait_timeout (8 hours). MySQL has no SET LOCAL, so the
// previous values are kept in session variables and restored by the
// returned function after the commit: a relay that stops with its COMMIT
// on the way (a half-open connection) leaves a session that the server
// still closes after limit, rolling the transaction back.
func (mysqlDialect) guardLeaseTx(ctx context.Context, tx Tx, limit time.Duration) (func(context.Context, Conn) error, error) {
	secs := max(int64((limit+time.Second-1)/time.Second), 1)
	_, err := tx.ExecContext(ctx, `SET @outbox_lease_wait = @@SESSION.wait_timeout, @outbox_lease_lock = @@SESSION.innodb_lock_wait_timeout, SESSION wait_timeout = ?, SESSION innodb_lock_wait_timeout = ?`, secs, secs)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, conn Conn) error {
		_, err := conn.ExecContext(ctx, `SET SESSION wait_timeout = @outbox_lease_wait, SESSION innodb_lock_wait_timeout = @outbox_lease_lock`)
		return err
	}, nil
}

// wakeSQL: writers send no notifications; the relay polls.
func (mysqlDialect) wakeSQL(storeTables) (string, string) { return "", "" }

func (mysqlDialect) secondsSince(expr string) string {
	return `TIMESTAMPDIFF(MICROSECOND, ` + expr + `, UTC_TIMESTAMP(6)) / 1000000`
}

func (mysqlDialect) timeCompare(col, op string) string { return col + " " + op + " ?" }
func (mysqlDialect) timeArg(t time.Time) any           { return t.UTC() }

// scanIDs reads a column of row ids.
func scanIDs(rows Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// mysqlLockName is the SQL of the name of the session lock of the owner in
// expr (see session.go). Names are the server's, so the database's name
// is part of it.
func mysqlLockName(t storeTables, expr string) string {
	return `CONCAT('outbox:', MD5(CONCAT_WS(CHAR(0), DATABASE(), '` + t.table + `', ` + expr + `)))`
}

// unlockSession releases the owner's named lock.
func (mysqlDialect) unlockSession(ctx context.Context, conn Conn, t storeTables, owner string) error {
	_, err := conn.ExecContext(ctx, `DO RELEASE_LOCK(`+mysqlLockName(t, "?")+`)`, owner)
	return err
}

// lockSession takes the owner's named lock, without waiting; the session
// is the connection's id.
func (mysqlDialect) lockSession(ctx context.Context, conn Conn, t storeTables, owner string) (bool, int64, error) {
	var got sql.NullInt64
	var id int64
	err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+mysqlLockName(t, "?")+`, 0), CONNECTION_ID()`, owner).Scan(&got, &id)
	return got.Valid && got.Int64 == 1, id, err
}

// endSession kills connection id if it holds owner's lock.
func (mysqlDialect) endSession(ctx context.Context, q Executor, t storeTables, owner string, id int64) error {
	var holder sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT IS_USED_LOCK(`+mysqlLockName(t, "?")+`)`, owner).Scan(&holder); err != nil {
		return err
	}
	if !holder.Valid || holder.Int64 != id {
		return nil
	}
	_, err := q.ExecContext(ctx, `KILL CONNECTION `+strconv.FormatInt(id, 10))
	return err
}

// lockStates asks IS_USED_LOCK, which takes no lock.
func (mysqlDialect) lockStates(ctx context.Context, q Executor, t storeTables, owner string) (map[string]lockState, error) {
	rows, err := q.QueryContext(ctx, `SELECT u.owner, IS_USED_LOCK(`+mysqlLockName(t, "u.owner")+`) IS NOT NULL,
			COALESCE((SELECT r.session_lock FROM `+t.relays+` r WHERE r.owner = u.owner), FALSE) FROM (
			SELECT owner FROM `+t.relays+` WHERE expires_at > UTC_TIMESTAMP(6) AND owner <> ?
			UNION SELECT owner FROM `+t.leases+` WHERE owner IS NOT NULL AND owner <> ? AND expires_at > UTC_TIMESTAMP(6)) u`, owner, owner)
	return scanLockStates(rows, err)
}
