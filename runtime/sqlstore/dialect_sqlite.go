package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// sqliteDialect is SQLite: the process's clock (unix microseconds where the
// schedule is compared), partial indexes, INSERT ... ON CONFLICT ...
// RETURNING, and writers serialised by the database, so ids follow commit
// order with no lock of ours.
type sqliteDialect struct{}

func (sqliteDialect) name() Dialect { return SQLite }
func (sqliteDialect) ph(int) string { return "?" }

func (sqliteDialect) ddl(table string) []string {
	base := baseName(table)
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
	}
}

func (sqliteDialect) migrateLock(string) string { return "" }

// write runs one INSERT ... ON CONFLICT (event_id) DO NOTHING RETURNING
// event_id per chunk. SQLite serialises every writing transaction, so the
// ids follow commit order.
func (sqliteDialect) write(ctx context.Context, conn Executor, table string, rows []Row, _ bool) (map[uuid.UUID]bool, error) {
	inserted := make(map[uuid.UUID]bool, len(rows))
	for start := 0; start < len(rows); start += maxRowsPerInsert {
		chunk := rows[start:min(start+maxRowsPerInsert, len(rows))]
		args, err := insertArgs(chunk)
		if err != nil {
			return nil, err
		}
		q := "INSERT INTO " + table + " (" + insertColumns + ") VALUES " + valuesList(len(chunk), 10) +
			" ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
		rs, err := conn.QueryContext(ctx, q, args...)
		if err := scanEventIDs(rs, err, inserted); err != nil {
			return nil, fmt.Errorf("insert into %s: %w", table, err)
		}
	}
	return inserted, nil
}

func (sqliteDialect) leaseTx() *sql.TxOptions { return nil }

func (sqliteDialect) leases(t storeTables) leaseOps {
	return returningLeases{
		registerQ: `INSERT INTO ` + t.relays + ` (owner, expires_at) VALUES (?2, ?1)
			ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at`,
		aliveQ:   `SELECT count(*) FROM ` + t.relays + ` WHERE expires_at > ?`,
		othersQ:  `SELECT count(*) FROM ` + t.relays + ` WHERE expires_at > ?1 AND owner <> ?2`,
		renewQ:   `UPDATE ` + t.leases + ` SET expires_at = ?1 WHERE owner = ?2 RETURNING shard`,
		releaseQ: `UPDATE ` + t.leases + ` SET owner = NULL, expires_at = NULL WHERE owner = ?`,
		acquireQ: `UPDATE ` + t.leases + ` SET owner = ?2, expires_at = ?1
			WHERE shard IN (SELECT shard FROM ` + t.leases + ` WHERE owner IS NULL OR expires_at <= ?3
				ORDER BY shard LIMIT ?4)
			RETURNING shard`,
		holdersQ: `SELECT owner, count(*) FROM ` + t.leases + `
			WHERE owner IS NOT NULL AND owner <> ?2 AND expires_at > ?1 GROUP BY owner`,
		freeQ:       `SELECT count(*) FROM ` + t.leases + ` WHERE owner IS NULL OR expires_at <= ?1`,
		forgetQ:     `DELETE FROM ` + t.relays + ` WHERE expires_at < ?1 - 3600000000`,
		unregisterQ: `DELETE FROM ` + t.relays + ` WHERE owner = ?`,
		clock: func(now time.Time, ttl time.Duration) ([]any, []any) {
			return []any{now.UnixMicro()}, []any{now.Add(ttl).UnixMicro()}
		},
	}
}

func (sqliteDialect) claimQuery(t storeTables, shardFilter string, limit int, maxBytes int64) (string, []any) {
	q := `SELECT ` + selectColumns + `, (SELECT count(*) FROM ` + t.relays + ` WHERE expires_at > ?1) FROM (
			SELECT c.*, sum(length(CAST(c.payload AS BLOB))) OVER (ORDER BY c.id) AS run FROM (
				SELECT ` + selectColumns + ` FROM ` + t.table + ` o
				WHERE o.published_at IS NULL AND o.parked_at IS NULL` + shardFilter + `
				AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM ` + t.table + `
					WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at > ?1))
				ORDER BY o.id LIMIT ?2) c) x
		WHERE run - length(CAST(payload AS BLOB)) < ?3 ORDER BY id`
	return q, []any{time.Now().UnixMicro(), limit, maxBytes}
}

// excludeIDs splices the ids (integers) into the statement.
func (sqliteDialect) excludeIDs(ids []int64, _ int) (string, []any) {
	return " AND o.id NOT IN (" + idList(ids) + ")", nil
}

func (sqliteDialect) publishedSet() (string, []any) {
	return "published_at = ?", []any{time.Now().UTC()}
}

func (sqliteDialect) updateFenced(ctx context.Context, db Executor, t storeTables, owner, set string, setArgs []any, ids []int64, _ *eventRange) error {
	return updateFencedIn(ctx, db, t, owner, set, setArgs, ids)
}

func (sqliteDialect) failureSet(kind failureKind, text string, cfg StoreConfig) (string, []any) {
	delay, maxDelay := cfg.RetryDelay.Microseconds(), cfg.MaxRetryDelay.Microseconds()
	now := time.Now()
	switch kind {
	case failPark:
		return `attempts = attempts + 1, last_error = ?, parked_at = ?`, []any{text, now.UTC()}
	case failAttempt:
		return `attempts = attempts + 1, last_error = ?,
			next_attempt_at = ? + min(? * (1 << min(attempts, 30)), ?),
			parked_at = CASE WHEN ? > 0 AND attempts + 1 >= ? THEN ? END`,
			[]any{text, now.UnixMicro(), delay, maxDelay, cfg.MaxAttempts, cfg.MaxAttempts, now.UTC()}
	default:
		return `last_error = ?, next_attempt_at = ?`, []any{text, now.UnixMicro() + delay}
	}
}

// deletePublished compares with the process's clock, which wrote
// published_at.
// SQLite serialises writers: one batch holds the write lock for the time it
// takes to delete batch rows, and writers wait that long at most.
func (sqliteDialect) deletePublished(ctx context.Context, db DB, t storeTables, olderThan time.Duration, batch int, maxID int64) (int64, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM `+t.table+` WHERE id IN (SELECT id FROM `+t.table+`
		WHERE published_at IS NOT NULL AND published_at < ?1 AND (?3 <= 0 OR id <= ?3) ORDER BY id LIMIT ?2)`,
		time.Now().Add(-olderThan).UTC(), batch, maxID)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (sqliteDialect) pendingAge(from string) string {
	return `COALESCE((julianday('now') - julianday((SELECT min(created_at) ` + from + `))) * 86400, 0)`
}

func (sqliteDialect) listen(context.Context, *Store, func()) error {
	return fmt.Errorf("sqlstore: listen: %w: LISTEN/NOTIFY needs PostgreSQL", errors.ErrUnsupported)
}

// guardLeaseTx does nothing: SQLite's locks end with the process's
// connection, and a stalled writer holds the database's write lock only
// until busy timeouts fail the others' attempts.
func (sqliteDialect) guardLeaseTx(context.Context, Tx, time.Duration) (func(context.Context, Conn) error, error) {
	return nil, nil
}

// wakeSQL: writers send no notifications; the relay polls.
func (sqliteDialect) wakeSQL(storeTables) (string, string) { return "", "" }

// secondsSince uses julianday, which reads both the column default's
// "YYYY-MM-DD HH:MM:SS" and the driver's formatting of a time.
func (sqliteDialect) secondsSince(expr string) string {
	return `(julianday('now') - julianday(` + expr + `)) * 86400`
}

// timeCompare compares julian days: created_at's default is text of
// CURRENT_TIMESTAMP, whose format differs from the driver's for a bound
// time, so the strings do not compare.
func (sqliteDialect) timeCompare(col, op string) string {
	return "julianday(" + col + ") " + op + " julianday(?)"
}

func (sqliteDialect) timeArg(t time.Time) any {
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}
