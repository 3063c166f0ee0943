package sqlstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// InboxDefaultTable is the inbox table used when a table name is empty.
const InboxDefaultTable = "outbox_inbox"

// InboxDDL returns the statements that create the inbox table and its index
// for dialect d, for users who run their own migrations. The statements are
// idempotent. An empty table means [InboxDefaultTable]. It returns an error
// wrapping [ErrInvalidTable] or [ErrUnsupportedDialect].
//
// The table has one row per applied event and consumer: the primary key
// (consumer, event_id) is what makes a second delivery a no-op, and the
// index on (consumer, processed_at) serves [Inbox.Prune].
func InboxDDL(d Dialect, table string) ([]string, error) {
	if table == "" {
		table = InboxDefaultTable
	}
	if err := CheckTable(table, MaxInboxTableName); err != nil {
		return nil, err
	}
	if _, err := sqlOf(d); err != nil {
		return nil, err
	}
	base := baseName(table)
	switch d {
	case Postgres:
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
	case MySQL:
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

// migrateInbox creates the inbox table and its index if they do not exist,
// in one transaction (on MySQL and MariaDB, whose DDL commits implicitly,
// one statement). It is safe to run on every start. An empty d means
// [DialectOf] db; an empty table means [InboxDefaultTable]. Several
// consumers may share one table.
func migrateInbox(ctx context.Context, db DB, d Dialect, table string) error {
	if nilDB(db) {
		return errNilDB
	}
	if d == "" {
		var err error
		if d, err = db.Dialect(); err != nil {
			return err
		}
	}
	if _, err := InboxDDL(d, table); err != nil {
		return err // before opening a transaction
	}
	return inTx(ctx, db, func(tx Tx) error { return MigrateInboxTx(ctx, tx, d, table) })
}

// MigrateInboxTx is [Migrate] in the caller's transaction tx (a
// Tx, or a GORM transaction's connection pool); d must be set.
func MigrateInboxTx(ctx context.Context, tx Executor, d Dialect, table string) error {
	stmts, err := InboxDDL(d, table)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("sqlstore: migrate inbox table: %w", err)
		}
	}
	return nil
}

// MaxInboxConsumerName is the longest consumer name, in characters, the
// MySQL inbox table holds (VARCHAR(255)); the other dialects have no limit.
const MaxInboxConsumerName = 255

// Inbox holds the statements of one inbox table, in the placeholders of its
// dialect: the marker insert that makes a handler's transaction apply an
// event at most once, and the prune of old markers. An Inbox is safe for
// concurrent use.
type Inbox struct {
	insert string
	// pgGuard is set when insert also bounds the transaction on the server
	// (PostgreSQL): Record then adds the timeout arguments.
	pgGuard bool
	// guard and unguard, when set (MySQL, MariaDB), run on the
	// connection of [Inbox.InTx] before its transaction begins and after
	// it ends: they set, then restore, the session's timeouts.
	guard, unguard string
	prune          string
	count          string
	dialect        Dialect
	// table is the inbox table, for the statements RecordBatch builds.
	table string
	// txTimeoutMS is txTimeout in whole milliseconds, for pgGuard.
	txTimeoutMS string
}

// NewInbox returns the inbox of table (empty: [InboxDefaultTable]) in
// dialect d. txTimeout bounds, on the server, a transaction in which
// [Inbox.Record] inserted a marker (see Record and [Inbox.InTx]); it must
// be positive. It returns
// an error wrapping [ErrInvalidTable] or [ErrUnsupportedDialect].
func NewInbox(d Dialect, table string, txTimeout time.Duration) (*Inbox, error) {
	if table == "" {
		table = InboxDefaultTable
	}
	if err := CheckTable(table, MaxInboxTableName); err != nil {
		return nil, err
	}
	if _, err := sqlOf(d); err != nil {
		return nil, err
	}
	if txTimeout <= 0 {
		return nil, fmt.Errorf("sqlstore: inbox: transaction timeout %v must be positive", txTimeout)
	}
	// ON CONFLICT DO NOTHING as the first statement of the transaction:
	// a concurrent duplicate blocks on the primary key until the first
	// transaction ends, then inserts nothing (or inserts, if the first
	// rolled back). A check-then-insert would race.
	s := &Inbox{
		dialect: d,
		table:   table,
		insert:  `INSERT INTO ` + table + ` (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?) ON CONFLICT (consumer, event_id) DO NOTHING`,
		prune: `DELETE FROM ` + table + ` WHERE consumer = ? AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = ? AND processed_at < ? ORDER BY processed_at LIMIT ?)`,
	}
	s.count = `SELECT count(*) FROM ` + table + ` WHERE consumer = ?`
	switch d {
	case Postgres:
		s.count = `SELECT count(*) FROM ` + table + ` WHERE consumer = $1`
		// The same insert, which also sets statement_timeout and
		// idle_in_transaction_session_timeout to txTimeout for the rest of
		// the transaction (set_config(..., true) is SET LOCAL), in the same
		// round trip. When the client gives up on a transaction whose
		// connection went half-open, the server still holds it open with
		// the marker's row lock, and the redelivery would wait on that lock
		// until the server's TCP keepalive notices (hours by default): the
		// timeouts make the server end it within txTimeout.
		s.insert = `INSERT INTO ` + table + ` (consumer, event_id, event_type, processed_at)
			SELECT $1::text, $2::uuid, $3::text, $4::timestamptz
			FROM (SELECT set_config('statement_timeout', $5::text, true), set_config('idle_in_transaction_session_timeout', $6::text, true)) AS guard
			ON CONFLICT (consumer, event_id) DO NOTHING`
		s.pgGuard = true
		// In whole milliseconds, rounded up, within PostgreSQL's range.
		s.txTimeoutMS = strconv.FormatInt(min(int64(max(1, (txTimeout+time.Millisecond-1)/time.Millisecond)), math.MaxInt32), 10)
		s.prune = `DELETE FROM ` + table + ` WHERE consumer = $1 AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = $2 AND processed_at < $3 ORDER BY processed_at LIMIT $4)`
	case MySQL:
		// INSERT IGNORE reports 0 rows for a duplicate key, with or without
		// clientFoundRows (which changes what ON DUPLICATE KEY UPDATE
		// reports). A concurrent duplicate waits on the primary key, as
		// on PostgreSQL, until the first transaction ends. IGNORE would
		// also truncate an overlong value: keep consumer names within
		// [MaxInboxConsumerName].
		s.insert = `INSERT IGNORE INTO ` + table + ` (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?)`
		// MySQL has no SET LOCAL: the session's wait_timeout (how long the
		// server waits for a client's next statement, in a transaction or
		// not) and innodb_lock_wait_timeout are set to txTimeout for the
		// transaction by InTx, on the transaction's connection, and
		// restored there after it ends. A client that vanished
		// mid-transaction is disconnected, its transaction rolled back and
		// its marker's lock released, within txTimeout of its last
		// statement; a redelivery waiting on a lock gives up within
		// txTimeout on the server too. The old values are read in the same
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
	return s, nil
}

// mysqlMaxWaitTimeout is the largest wait_timeout MySQL accepts (a year, in
// seconds).
const mysqlMaxWaitTimeout = 31536000

// Record inserts the inbox marker of consumer's event in tx (the handler's
// transaction: one from [Inbox.InTx], or any Tx or GORM transaction's
// connection pool), with processed time now, and reports whether it
// inserted one (false: the event was applied before). It should be the
// first statement of the transaction: a concurrent delivery of the same
// event then waits on the marker until this transaction ends.
//
// On PostgreSQL the insert also sets, for the rest of the transaction,
// statement_timeout and idle_in_transaction_session_timeout to the inbox's
// transaction timeout, so the server ends a transaction its client
// abandoned and releases the marker. MySQL and MariaDB have no SET LOCAL:
// there [Inbox.InTx] bounds the transaction on the server instead.
func (s *Inbox) Record(ctx context.Context, tx Executor, consumer string, eventID uuid.UUID, eventType string, now time.Time) (applied bool, err error) {
	args := []any{consumer, eventID.String(), eventType, now.UTC()}
	if s.pgGuard {
		args = append(args, s.txTimeoutMS, s.txTimeoutMS)
	}
	res, err := tx.ExecContext(ctx, s.insert, args...)
	if err != nil {
		return false, fmt.Errorf("sqlstore: inbox: insert marker: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlstore: inbox: insert marker: rows affected: %w", err)
	}
	return n > 0, nil
}

// MaxInboxBatch is the most entries one [Inbox.RecordBatch] call takes (it
// keeps a statement's placeholders within every dialect's limit).
const MaxInboxBatch = 5000

// InboxEntry is one event of [Inbox.RecordBatch].
type InboxEntry struct {
	EventID   uuid.UUID
	EventType string
}

// RecordBatch is [Inbox.Record] for several events in one transaction: it
// inserts the markers of entries, in their order, and reports for each
// whether it inserted it (false: the event was applied before, or its id
// appears earlier in entries). On PostgreSQL and SQLite that is one
// INSERT ... ON CONFLICT DO NOTHING RETURNING statement; on MySQL and
// MariaDB, one INSERT IGNORE per entry. Markers are inserted in the order
// of entries, so two transactions marking overlapping runs of the same
// stream in the same order wait on each other instead of deadlocking. As
// with Record: call it first in the transaction, best one from
// [Inbox.InTx]. entries must hold at most [MaxInboxBatch] entries.
func (s *Inbox) RecordBatch(ctx context.Context, tx Executor, consumer string, entries []InboxEntry, now time.Time) (applied []bool, err error) {
	if len(entries) > MaxInboxBatch {
		return nil, fmt.Errorf("sqlstore: inbox: %d entries in one batch, more than %d", len(entries), MaxInboxBatch)
	}
	applied = make([]bool, len(entries))
	first := make(map[uuid.UUID]int, len(entries)) // event id → index of its first entry
	unique := make([]InboxEntry, 0, len(entries))
	for i, e := range entries {
		if _, dup := first[e.EventID]; !dup {
			first[e.EventID] = i
			unique = append(unique, e)
		}
	}
	if len(unique) == 0 {
		return applied, nil
	}
	if s.dialect == MySQL {
		for _, e := range unique {
			res, err := tx.ExecContext(ctx, s.insert, consumer, e.EventID.String(), e.EventType, now.UTC())
			if err != nil {
				return nil, fmt.Errorf("sqlstore: inbox: insert marker: %w", err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return nil, fmt.Errorf("sqlstore: inbox: insert marker: rows affected: %w", err)
			}
			applied[first[e.EventID]] = n > 0
		}
		return applied, nil
	}
	var q strings.Builder
	args := make([]any, 0, 4+2*len(unique))
	if s.dialect == Postgres {
		// The guard of Record's insert, once for the statement.
		args = append(args, consumer, now.UTC(), s.txTimeoutMS, s.txTimeoutMS)
		q.WriteString(`INSERT INTO ` + s.table + ` (consumer, event_id, event_type, processed_at)
			SELECT $1::text, v.id::uuid, v.typ, $2::timestamptz
			FROM (VALUES `)
		for i, e := range unique {
			if i > 0 {
				q.WriteString(", ")
			}
			n := len(args)
			fmt.Fprintf(&q, "($%d::text, $%d::text)", n+1, n+2)
			args = append(args, e.EventID.String(), e.EventType)
		}
		q.WriteString(`) AS v (id, typ), (SELECT set_config('statement_timeout', $3::text, true), set_config('idle_in_transaction_session_timeout', $4::text, true)) AS guard
			ON CONFLICT (consumer, event_id) DO NOTHING RETURNING event_id::text`)
	} else {
		q.WriteString(`INSERT INTO ` + s.table + ` (consumer, event_id, event_type, processed_at) VALUES `)
		for i, e := range unique {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?)")
			args = append(args, consumer, e.EventID.String(), e.EventType, now.UTC())
		}
		q.WriteString(` ON CONFLICT (consumer, event_id) DO NOTHING RETURNING event_id`)
	}
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox: insert markers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlstore: inbox: insert markers: %w", err)
		}
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: inbox: insert markers: returned event id %q: %w", id, err)
		}
		i, ok := first[u]
		if !ok {
			return nil, fmt.Errorf("sqlstore: inbox: insert markers: returned event id %s was not in the batch", u)
		}
		applied[i] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: inbox: insert markers: %w", err)
	}
	return applied, nil
}

// InTx runs fn in a transaction begun with ctx on db, for an inbox's
// [Inbox.Record] or [Inbox.RecordBatch] and the handler's writes: it
// commits when fn returns nil, and rolls back when fn returns an error or
// panics (the panic goes on). tx is db's transaction: a driver's UnwrapTx
// turns it into the handler's own type (*sql.Tx, pgx.Tx, *gorm.DB).
//
// On PostgreSQL and SQLite that is all. MySQL and MariaDB have no SET
// LOCAL, so there InTx also bounds the transaction on the server: it takes
// a connection of its own, sets that session's wait_timeout and
// innodb_lock_wait_timeout to the inbox's transaction timeout (in whole
// seconds, rounded up) before BEGIN, and puts the session's own values
// back after the transaction ended, not before its COMMIT. The COMMIT is
// thus sent under the short timeouts: when the connection turns half-open
// and the COMMIT never arrives, the server still ends the transaction, and
// releases the marker's lock a redelivery waits on, within the timeout
// instead of its wait_timeout (8 hours by default). A connection whose
// timeouts could not be put back is discarded, never returned to the pool.
func (s *Inbox) InTx(ctx context.Context, db DB, fn func(tx Tx) error) (err error) {
	if nilDB(db) {
		return errNilDB
	}
	if s.guard == "" {
		return transact(ctx, db, fn)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlstore: inbox: connect: %w", err)
	}
	if _, err := conn.ExecContext(ctx, s.guard); err != nil {
		conn.Discard()
		return fmt.Errorf("sqlstore: inbox: set session timeouts: %w", err)
	}
	defer func() {
		if _, rerr := conn.ExecContext(ctx, s.unguard); rerr != nil {
			// Usually the connection is gone (a deadline). If it is
			// not, the session keeps the short timeouts: the pool must
			// not hand it out again. The transaction's outcome is err.
			conn.Discard()
			return
		}
		_ = conn.Close()
	}()
	return transact(ctx, conn, fn)
}

// transact runs fn in a transaction of db, begun with ctx: it commits when
// fn returns nil, and rolls back when fn returns an error or panics (the
// panic goes on). fn's error is returned as it is.
func transact(ctx context.Context, db Beginner, fn func(tx Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlstore: inbox: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			// Rollback fails when a deadline already ended the
			// transaction; the server discards it either way.
			_ = tx.Rollback(ctx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sqlstore: inbox: commit: %w", err)
	}
	return nil
}

// Prune deletes consumer's markers processed before cutoff, at most batch
// per statement (each in its own transaction when db is a pool), until none
// is left, and returns how many it deleted. Concurrent runs are safe. It
// returns ctx's error when ctx is done between batches, with the count so
// far. batch must be positive.
func (s *Inbox) Prune(ctx context.Context, db Executor, consumer string, cutoff time.Time, batch int) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("sqlstore: prune inbox: batch %d must be positive", batch)
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("sqlstore: prune inbox: %w", err)
		}
		n, err := s.pruneBatch(ctx, db, consumer, cutoff, batch)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Count returns how many markers consumer has in the inbox: one per event
// it applied and [Inbox.Prune] has not deleted yet. It counts them on the
// primary key's index, which takes time in proportion to their number
// (milliseconds for thousands, seconds for tens of millions): call it for
// monitoring at a modest rate, as adapters/metrics does with a cache.
func (s *Inbox) Count(ctx context.Context, db Executor, consumer string) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, s.count, consumer).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlstore: count inbox: %w", err)
	}
	return n, nil
}

// pruneBatch deletes at most batch of consumer's markers processed before
// cutoff, in one statement.
func (s *Inbox) pruneBatch(ctx context.Context, db Executor, consumer string, cutoff time.Time, batch int) (int64, error) {
	args := []any{consumer, consumer, cutoff.UTC(), batch}
	if s.dialect == MySQL {
		args = []any{consumer, cutoff.UTC(), batch}
	}
	res, err := db.ExecContext(ctx, s.prune, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune inbox: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune inbox: rows affected: %w", err)
	}
	return n, nil
}

// Consumers returns the names of the consumers that have markers in the
// inbox, sorted, for pruning every consumer's markers (see [Retention]). It
// reads one primary-key probe per consumer (a loose index scan), not the
// whole table.
func (s *Inbox) Consumers(ctx context.Context, db Executor) ([]string, error) {
	rows, err := db.QueryContext(ctx, `WITH RECURSIVE c (consumer) AS (
			SELECT MIN(consumer) FROM `+s.table+`
			UNION ALL
			SELECT (SELECT MIN(consumer) FROM `+s.table+` WHERE consumer > c.consumer) FROM c WHERE c.consumer IS NOT NULL
		) SELECT consumer FROM c WHERE consumer IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: inbox consumers: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("sqlstore: inbox consumers: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: inbox consumers: %w", err)
	}
	return out, nil
}
