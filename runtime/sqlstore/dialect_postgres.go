package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// postgresDialect is PostgreSQL: the database's clock, partial indexes,
// INSERT ... ON CONFLICT ... RETURNING, transaction-scoped advisory locks
// for commit order, array parameters, and LISTEN/NOTIFY.
type postgresDialect struct{}

func (postgresDialect) name() Dialect   { return Postgres }
func (postgresDialect) ph(n int) string { return "$" + strconv.Itoa(n) }

// ddl is the plain table's: baseDDL, then the queue of pending rows
// (queueDDL), which replaces the pending index.
func (d postgresDialect) ddl(table string) []string {
	return append(d.baseDDL(table), queueDDL(table)...)
}

// baseDDL is the outbox table, its indexes but the pending one, its lease
// tables and its wake-up register, for both layouts.
func (postgresDialect) baseDDL(table string) []string {
	base := baseName(table)
	fn := qualify(table, base+"_notify")
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id              BIGSERIAL PRIMARY KEY,
	event_id        UUID        NOT NULL,
	event_type      TEXT        NOT NULL,
	event_version   INTEGER     NOT NULL,
	aggregate_type  TEXT        NOT NULL,
	aggregate_id    TEXT        NOT NULL,
	shard           SMALLINT    NOT NULL DEFAULT 0,
	topic           TEXT        NOT NULL,
	payload         TEXT        NOT NULL,
	headers         TEXT,
	occurred_at     TIMESTAMPTZ NOT NULL,
	created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
	published_at    TIMESTAMPTZ,
	attempts        INTEGER     NOT NULL DEFAULT 0,
	last_error      TEXT,
	next_attempt_at TIMESTAMPTZ,
	parked_at       TIMESTAMPTZ
)`,
		upgradePostgres(table),
		`CREATE UNIQUE INDEX IF NOT EXISTS ` + base + `_event_id ON ` + table + ` (event_id)`,
		`CREATE INDEX IF NOT EXISTS ` + base + `_blocked ON ` + table + ` (aggregate_type, aggregate_id)
	WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS ` + base + `_parked ON ` + table + ` (id) WHERE parked_at IS NOT NULL AND published_at IS NULL`,
		`CREATE TABLE IF NOT EXISTS ` + leasesTable(table) + ` (
	shard      SMALLINT PRIMARY KEY,
	owner      TEXT,
	expires_at TIMESTAMPTZ
)`,
		seedLeases(table, "ON CONFLICT DO NOTHING"),
		`CREATE TABLE IF NOT EXISTS ` + relaysTable(table) + ` (
	owner        TEXT PRIMARY KEY,
	expires_at   TIMESTAMPTZ NOT NULL,
	session_lock BOOLEAN NOT NULL DEFAULT FALSE
)`,
		// Tables of earlier versions: session_lock says that the relay
		// holds its session lock (see sessionLocker).
		`ALTER TABLE ` + relaysTable(table) + ` ADD COLUMN IF NOT EXISTS session_lock BOOLEAN NOT NULL DEFAULT FALSE`,
		// queue says that the relay knows the queue of pending rows (see
		// queueDDL).
		`ALTER TABLE ` + relaysTable(table) + ` ADD COLUMN IF NOT EXISTS queue BOOLEAN NOT NULL DEFAULT FALSE`,
		// The wake-up register (Store.RequestWake): a sequence whose value
		// is the time, in Unix milliseconds on the database's clock, until
		// which some relay waits for a notification. setval is not
		// transactional, so a request is seen at once by every writer that
		// reads it (see writerWake).
		`CREATE SEQUENCE IF NOT EXISTS ` + wakeSequence(table) + ` MINVALUE 0 START 0`,
		// Earlier versions notified from a statement trigger that read the
		// register on every insert; writers now read it at most every
		// 100 ms and notify themselves, which costs them next to nothing.
		// (Looked up first: DROP TRIGGER locks the table even when there is
		// none, and this runs at every start.)
		`DO $$ BEGIN
	IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '` + table + `'::regclass AND tgname = '` + base + `_notify') THEN
		DROP TRIGGER ` + base + `_notify ON ` + table + `;
	END IF;
END $$`,
		`DROP FUNCTION IF EXISTS ` + fn + `()`,
	}
}

// pendingIndexDDL is the partial index of the pending rows, which the
// partitioned layout claims from (the plain table has its queue instead).
func pendingIndexDDL(table string) string {
	return `CREATE INDEX IF NOT EXISTS ` + baseName(table) + `_pending ON ` + table + ` (id) WHERE published_at IS NULL AND parked_at IS NULL`
}

// queueDDL creates, on a plain table, the queue of its pending rows
// (see "The queue" in the package documentation): the narrow table
// <table>_queue of their ids and shards, filled by a statement trigger
// that reads the rows each INSERT added (a transition table, one INSERT
// per writer statement), and emptied by the relay's mark, a DELETE. On a
// table of an earlier version it runs once, in the migration's
// transaction: it creates the queue and the trigger (which takes a lock
// that makes writers wait until the transaction commits), then queues
// the rows pending so far, and drops the pending index, which nothing
// reads any more. A partitioned table (migrated by [Migrate] without
// Partitioned, which is harmless) keeps its pending index and gets no
// queue.
func queueDDL(table string) []string {
	base := baseName(table)
	q, fn, guard := queueTable(table), queueFunc(table), qualify(table, base+"_lease_guard")
	return []string{leaseGuardDDL(table, guard), `DO $outbox$
BEGIN
	IF to_regclass('` + q + `') IS NULL
		AND NOT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = '` + table + `'::regclass) THEN
		CREATE TABLE ` + q + ` (
			qid    BIGINT   PRIMARY KEY,
			qshard SMALLINT NOT NULL
		);
		-- The function names the queue with its schema, and runs as its
		-- owner: a writer inserts whatever its search_path, and needs no
		-- privilege on the queue. A TRUNCATE of the table (a test
		-- suite's, say) empties the queue too.
		EXECUTE format($f$CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql
			SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
		BEGIN
			IF TG_OP = 'TRUNCATE' THEN
				TRUNCATE %1$s;
			ELSE
				INSERT INTO %1$s (qid, qshard)
					SELECT id, shard FROM outbox_new_rows WHERE published_at IS NULL AND parked_at IS NULL;
			END IF;
			RETURN NULL;
		END
		$fn$$f$, (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = '` + q + `'::regclass));
		CREATE TRIGGER ` + base + `_enqueue AFTER INSERT ON ` + table + `
			REFERENCING NEW TABLE AS outbox_new_rows FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `();
		CREATE TRIGGER ` + base + `_truncate AFTER TRUNCATE ON ` + table + `
			FOR EACH STATEMENT EXECUTE FUNCTION ` + fn + `();
		INSERT INTO ` + q + ` (qid, qshard)
			SELECT id, shard FROM ` + table + ` WHERE published_at IS NULL AND parked_at IS NULL;
		DROP INDEX IF EXISTS ` + qualify(table, base+"_pending") + `;
		-- Relays of earlier versions claim by published_at, which the
		-- queue's mark leaves NULL: they would publish every row again.
		-- They lose their shards now, and a guard (its function created
		-- before this block) keeps them from taking any: a lease goes
		-- only to a relay registered as knowing the queue.
		CREATE TRIGGER ` + base + `_lease_guard BEFORE UPDATE ON ` + leasesTable(table) + `
			FOR EACH ROW EXECUTE FUNCTION ` + guard + `();
		UPDATE ` + leasesTable(table) + ` SET owner = NULL, expires_at = NULL;
	END IF;
END
$outbox$`}
}

// leaseGuardDDL (re)creates the function of the lease guard (see
// queueDDL): a shard goes to an owner only if the relays table has it
// registered as knowing the queue. The function names the relays table with
// its schema and sets its own search_path, so it answers the same whatever
// the search_path of the session that updates the leases (the first
// version named the table as Migrate was given it: a relay whose
// search_path did not reach it could take no shard). It is replaced only
// when it is missing or is that first version, and not on a partitioned
// table, which has no queue.
func leaseGuardDDL(table, guard string) string {
	return `DO $outbox$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('` + guard + `()') AND proconfig IS NOT NULL)
		AND NOT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = '` + table + `'::regclass) THEN
		EXECUTE format($f$CREATE OR REPLACE FUNCTION ` + guard + `() RETURNS trigger LANGUAGE plpgsql
			SET search_path = pg_catalog, pg_temp AS $fn$
		BEGIN
			IF NEW.owner IS NOT NULL AND NEW.owner IS DISTINCT FROM OLD.owner
				AND NOT EXISTS (SELECT 1 FROM %s r WHERE r.owner = NEW.owner AND r.queue) THEN
				RETURN NULL;
			END IF;
			RETURN NEW;
		END
		$fn$$f$, (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = '` + relaysTable(table) + `'::regclass));
	END IF;
END
$outbox$`
}

// upgradePostgres brings a table of an earlier version up to date: rows get
// a shard, and JSONB payloads and headers (which refuse a NUL character and
// cost a parse per insert) become TEXT. It takes no lock on a table that is
// already up to date. It reads the catalog (pg_attribute) rather than
// information_schema.columns, whose view checks privileges on every column
// of the database: on a server with many schemas that was a migration's
// slowest statement.
func upgradePostgres(table string) string {
	col := `FROM pg_attribute WHERE attrelid = to_regclass('` + table + `') AND NOT attisdropped`
	return `DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 ` + col + ` AND attname = 'shard') THEN
		ALTER TABLE ` + table + ` ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
	END IF;
	IF EXISTS (SELECT 1 ` + col + ` AND attname = 'payload' AND atttypid = 'jsonb'::regtype) THEN
		ALTER TABLE ` + table + ` ALTER COLUMN payload TYPE TEXT, ALTER COLUMN headers TYPE TEXT;
	END IF;
END
$$`
}

// migrateLock serialises concurrent first starts, which would race on
// CREATE ... IF NOT EXISTS. The lock is the table name's in every schema:
// migrations in other schemas wait for each other too. (A lock per schema
// let a test suite's many schemas migrate at once, and PostgreSQL 15 then
// answered new connections only after seconds, sometimes minutes; that was
// on a server whose catalogs were bloated, and was not tried again since.)
func (postgresDialect) migrateLock(table string) string {
	return `SELECT pg_advisory_xact_lock(` + strconv.Itoa(int(int32(aggregateHash("outbox:migrate", table)))) + `)`
}

// insertCasts are the PostgreSQL types of insertColumns, for the VALUES list
// of an INSERT ... SELECT, whose parameters have no target column to take a
// type from.
var insertCasts = [...]string{"uuid", "text", "int4", "text", "text", "text", "text", "text", "timestamptz", "int2"}

// write runs one INSERT per chunk that first takes a transaction-scoped
// advisory lock per aggregate (sorted, so one statement never deadlocks
// with another), before any row gets its id: two transactions writing
// events of one aggregate are serialised from the first write to the
// commit, so the aggregate's ids follow commit order, whatever the write
// path (an aggregate saved under its row lock, or Enqueue, which takes
// none). Rows of a new aggregate ([Row.NewAggregate]) need no lock, nor
// deduplication: a chunk of only such rows is a plain INSERT. Otherwise ON
// CONFLICT (event_id) DO NOTHING RETURNING event_id reports the inserted
// ids.
func (d postgresDialect) write(ctx context.Context, conn Executor, table string, rows []Row, orderLocks bool) (map[uuid.UUID]bool, error) {
	inserted := make(map[uuid.UUID]bool, len(rows))
	for start := 0; start < len(rows); start += maxRowsPerInsert {
		chunk := rows[start:min(start+maxRowsPerInsert, len(rows))]
		q, args, returning, err := d.insertSQL(table, chunk, orderLocks)
		if err != nil {
			return nil, err
		}
		if !returning {
			// Every row is inserted, or the statement fails.
			if _, err := conn.ExecContext(ctx, q, args...); err != nil {
				return nil, fmt.Errorf("insert into %s: %w", table, err)
			}
			for _, r := range chunk {
				inserted[r.Envelope.EventID] = true
			}
			continue
		}
		rs, err := conn.QueryContext(ctx, q, args...)
		if err := scanEventIDs(rs, err, inserted); err != nil {
			return nil, fmt.Errorf("insert into %s: %w", table, err)
		}
	}
	return inserted, nil
}

// insertSQL builds the INSERT of rows and its arguments. A statement that
// returns the event ids of the rows it inserted (returning) may skip some
// (ON CONFLICT DO NOTHING); one that does not inserts them all or fails.
func (d postgresDialect) insertSQL(table string, rows []Row, orderLocks bool) (q string, args []any, returning bool, err error) {
	vals, err := insertArgs(rows)
	if err != nil {
		return "", nil, false, err
	}
	var locks []int32
	if orderLocks {
		locks = orderLockKeys(rows)
	}
	var b strings.Builder
	if len(locks) == 0 {
		b.WriteString("INSERT INTO " + table + " (" + insertColumns + ") VALUES ")
		d.writeValues(&b, len(rows), 1, false)
		if !slices.ContainsFunc(rows, needsOrderLock) {
			// Only new aggregates: their events cannot have rows yet, and
			// leaving out the ON CONFLICT arbiter saves an index probe
			// per row, and RETURNING a result set. A duplicate event id
			// fails the write instead.
			return b.String(), vals, false, nil
		}
		b.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING event_id")
		return b.String(), vals, true, nil
	}
	// The first key is the table's oid, so outbox tables of other schemas
	// (or databases' other two-key advisory locks) do not share the locks.
	args = append(make([]any, 0, 1+len(vals)), locks)
	b.WriteString("WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(('" + table +
		"'::regclass::oid::int8 - 2147483648)::int4, k) FROM unnest($1::int4[]) AS u(k) ORDER BY k) ")
	args = append(args, vals...)
	b.WriteString("INSERT INTO " + table + " (" + insertColumns + ") SELECT * FROM (VALUES ")
	d.writeValues(&b, len(rows), 2, true)
	// The gate is evaluated once, before the first row is produced and so
	// before any row takes its id from the sequence.
	b.WriteString(") AS v WHERE (SELECT count(*) FROM l) > 0 ON CONFLICT (event_id) DO NOTHING RETURNING event_id")
	return b.String(), args, true, nil
}

// writeValues writes the VALUES rows of n outbox rows, their placeholders
// numbered from first; with casts, each placeholder is cast to its column's
// type (a VALUES list under INSERT ... SELECT has no column to take it from).
func (d postgresDialect) writeValues(b *strings.Builder, n, first int, casts bool) {
	ph := first
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j, cast := range insertCasts {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(d.ph(ph))
			if casts {
				b.WriteString("::" + cast)
			}
			ph++
		}
		b.WriteByte(')')
	}
}

// orderLockKeys returns the sorted, distinct commit-order lock keys of the
// aggregates of rows that need one (see needsOrderLock).
func orderLockKeys(rows []Row) []int32 {
	var keys []int32
	for _, r := range rows {
		if needsOrderLock(r) {
			keys = append(keys, int32(aggregateHash(r.Envelope.AggregateType, r.Envelope.AggregateID)))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func (postgresDialect) leaseTx() *sql.TxOptions { return nil }

// guardLeaseTx sets, for this transaction only, the server's timeouts on a
// statement and on a client idle inside the transaction: the server then
// terminates a stalled relay's session and releases its locks.
func (postgresDialect) guardLeaseTx(ctx context.Context, tx Tx, limit time.Duration) (func(context.Context, Conn) error, error) {
	ms := strconv.FormatInt(max(limit.Milliseconds(), 1), 10)
	_, err := tx.ExecContext(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('statement_timeout', $1, true)`, ms)
	return nil, err // set_config(..., true) ends with the transaction
}

func (postgresDialect) leases(t storeTables) leaseOps {
	until := "now() + $1 * interval '1 microsecond'"
	return returningLeases{
		// queue: this relay knows the queue (see queueDDL's lease guard).
		registerQ: `INSERT INTO ` + t.relays + ` (owner, expires_at, session_lock, queue) VALUES ($2, ` + until + `, $3, TRUE)
			ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at, session_lock = EXCLUDED.session_lock, queue = TRUE`,
		lockColumn: true,
		aliveQ:     `SELECT count(*) FROM ` + t.relays + ` WHERE expires_at > now()`,
		othersQ:    `SELECT count(*) FROM ` + t.relays + ` WHERE expires_at > now() AND owner <> $1`,
		renewQ:     `UPDATE ` + t.leases + ` SET expires_at = ` + until + ` WHERE owner = $2 RETURNING shard`,
		releaseQ:   `UPDATE ` + t.leases + ` SET owner = NULL, expires_at = NULL WHERE owner = $1`,
		acquireQ: `UPDATE ` + t.leases + ` SET owner = $2, expires_at = ` + until + `
			WHERE shard IN (SELECT shard FROM ` + t.leases + ` WHERE owner IS NULL OR expires_at <= now()
				ORDER BY shard LIMIT $3 FOR UPDATE SKIP LOCKED)
			RETURNING shard`,
		holdersQ: `SELECT owner, count(*) FROM ` + t.leases + `
			WHERE owner IS NOT NULL AND owner <> $1 AND expires_at > now() GROUP BY owner`,
		freeQ:       `SELECT count(*) FROM ` + t.leases + ` WHERE owner IS NULL OR expires_at <= now()`,
		forgetQ:     `DELETE FROM ` + t.relays + ` WHERE expires_at < now() - interval '1 hour'`,
		unregisterQ: `DELETE FROM ` + t.relays + ` WHERE owner = $1`,
		clock: func(_ time.Time, ttl time.Duration) ([]any, []any) {
			if ttl == 0 {
				return nil, nil
			}
			return nil, []any{ttl.Microseconds()}
		},
	}
}

func (postgresDialect) claimQuery(t storeTables, shardFilter string, limit int, maxBytes int64) (string, []any) {
	q := postgresBlocked(t) + `
		SELECT ` + selectColumns + `, ` + postgresAlive(t) + ` FROM (
			SELECT c.*, sum(octet_length(c.payload)) OVER (ORDER BY c.id) AS run FROM (
				SELECT ` + postgresClaimColumns(t, selectColumns) + postgresClaimable(t, shardFilter) + `
				ORDER BY ` + postgresClaimOrder(t) + ` LIMIT $1) c) x
		WHERE run - octet_length(payload) < $2 ORDER BY id`
	return q, []any{limit, maxBytes}
}

// claimSmallQuery reads the claimable rows once (through the queue's
// window when window is set, see queueWindowClaim), a payload larger than
// small as NULL (payload is NOT NULL, so NULL marks it): the client stops
// at it. An octet_length does not detoast a large payload. (It used to
// find the first large payload with a sub-select over the same rows
// first: in a long drain, before vacuum has run, each scan of the pending
// index also visits the entries of the rows marked so far, and the
// second scan doubled that.)
func (postgresDialect) claimSmallQuery(t storeTables, shardFilter string, limit int, small int64, window bool) (string, []any) {
	cols := strings.Replace(postgresClaimColumns(t, selectColumns), "payload", "CASE WHEN octet_length(o.payload) > $2::bigint THEN NULL ELSE o.payload END", 1)
	if t.queue != "" && window {
		return queueWindowClaim(t, shardFilter, cols), []any{limit, small}
	}
	q := postgresBlocked(t) + `
		SELECT ` + cols + `, ` + postgresAlive(t) + postgresClaimable(t, shardFilter) + `
		ORDER BY ` + postgresClaimOrder(t) + ` LIMIT $1`
	return q, []any{limit, small}
}

// postgresBlocked is the WITH clause of the aggregates with a waiting or
// parked row, b.
func postgresBlocked(t storeTables) string {
	return `WITH b AS MATERIALIZED (SELECT DISTINCT aggregate_type, aggregate_id FROM ` + t.table + `
			WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at > now()))`
}

// postgresAlive counts the relays alive.
func postgresAlive(t storeTables) string {
	return `(SELECT count(*) FROM ` + t.relays + ` WHERE expires_at > now())`
}

// postgresClaimable is the FROM and WHERE of the claimable rows, the
// table aliased o, less those of the aggregates in b. With a queue, it
// walks the queue in id order, the shard filter on the queue's column, and
// reads each row by its primary key (OFFSET 0 keeps the planner from
// turning the lookups into a join that reads the whole table); a row
// published or parked by a process that does not know the queue (a relay
// of an earlier version in a rolling upgrade, pgcdc) is passed over.
func postgresClaimable(t storeTables, filter string) string {
	if t.queue != "" {
		return ` FROM ` + queueWalk(t) + `
				WHERE o.published_at IS NULL AND o.parked_at IS NULL` + onQueue.Replace(filter) + `
				AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM b)`
	}
	return ` FROM ` + t.table + ` o
				WHERE o.published_at IS NULL AND o.parked_at IS NULL` + filter + `
				AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM b)`
}

// queueWindow is how much wider than the claim's limit, in ids, the
// window of a queue claim may be for queueWindowClaim to read it as a
// range of the table.
const queueWindow = 4

// queueWindowClaim is the claim of a table with a queue by a relay that
// holds every shard (claimSmallQuery's, its columns cols). The window, wq,
// is the queue's first limit entries (less the filter's: the rows in
// flight), its bounds in w. While their ids lie within queueWindow times
// limit of each other, as they do while a backlog drains, the first branch
// reads the table's rows between the bounds in the order of its primary
// key, each checked against a hash of the window (a NOT IN over a
// subquery is planned as a hashed subplan, and never as a join): the rows
// arrive in key order and need no lookup each, and the window, read once,
// is every entry in its bounds that the filter lets through. The second
// branch walks the queue after the window (from its start when the window
// is wider: the first branch's one-time filter is then false and it does
// not run), a key lookup per row, as postgresClaimable does. Both are read
// in the order of the same key and the second's ids are all above the
// first's: the merge takes the window's rows, then the walk's, with no
// sort, and the walk reads no further than its first row once the window
// fills the claim. A window whose rows are held (an aggregate that waits,
// say) is filled from behind it. Unlike a join of the queue and the
// table, which the planner turned into a hash join and a sort once the
// tables had statistics, this shape has one plan.
func queueWindowClaim(t storeTables, filter, cols string) string {
	qf := onQueue.Replace(filter)
	rowCols := `o.event_id, o.event_type, o.event_version, o.aggregate_type, o.aggregate_id, o.topic, o.payload,
			o.headers, o.occurred_at, o.created_at, o.attempts, o.next_attempt_at`
	claimable := ` AND o.published_at IS NULL AND o.parked_at IS NULL
				AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM b)`
	narrow := `(SELECT hi - lo FROM w) < ` + strconv.Itoa(queueWindow) + ` * $1::bigint`
	return postgresBlocked(t) + `,
		wq AS MATERIALIZED (SELECT q.qid FROM ` + t.queue + ` q WHERE TRUE` + qf + ` ORDER BY q.qid LIMIT $1),
		w AS MATERIALIZED (SELECT min(qid) AS lo, max(qid) AS hi FROM wq)
		SELECT ` + cols + `, ` + postgresAlive(t) + ` FROM (
			(SELECT o.id, ` + rowCols + ` FROM ` + t.table + ` o
				WHERE ` + narrow + ` AND o.id BETWEEN (SELECT lo FROM w) AND (SELECT hi FROM w)
				AND NOT (o.id NOT IN (SELECT qid FROM wq))` + claimable + `
				ORDER BY o.id LIMIT $1)
			UNION ALL
			(SELECT q.qid AS id, ` + rowCols + ` FROM ` + queueWalk(t) + `
				WHERE q.qid > (SELECT CASE WHEN ` + narrow + ` THEN hi ELSE lo - 1 END FROM w)` + qf + claimable + `
				ORDER BY q.qid LIMIT $1)) o
		ORDER BY id LIMIT $1`
}

// queueWalk is the FROM of the queue's entries, aliased q, each with its
// row, aliased o, read by its primary key (OFFSET 0 keeps the planner from
// turning the lookups into a join that reads the whole table).
func queueWalk(t storeTables) string {
	return t.queue + ` q CROSS JOIN LATERAL (SELECT * FROM ` + t.table + ` o WHERE o.id = q.qid OFFSET 0) o`
}

// onQueue moves a claim filter's conditions on the table's shard and id
// to the queue's columns.
var onQueue = strings.NewReplacer("o.shard IN", "q.qshard IN", "o.id NOT IN", "q.qid NOT IN")

// postgresClaimColumns is cols, the claim's columns; with a queue, a row
// with a retry schedule (next_attempt_at: it failed before, or was
// replayed or unparked) has its attempts as -1 - attempts, so that the
// published mark clears the schedule on such rows alone (scanClaim,
// queueFencedSQL).
func postgresClaimColumns(t storeTables, cols string) string {
	if t.queue == "" {
		return cols
	}
	return strings.TrimSuffix(cols, "attempts") + "CASE WHEN o.next_attempt_at IS NULL THEN o.attempts ELSE -1 - o.attempts END AS attempts"
}

// postgresClaimOrder is the claim's ORDER BY: the queue's key, whose
// index the claim walks, or the table's.
func postgresClaimOrder(t storeTables) string {
	if t.queue != "" {
		return "q.qid"
	}
	return "o.id"
}

// excludeIDs binds the ids as one array, so the statement's text, and
// the driver's prepared statement, stay the same; NOT IN over a subquery
// is planned as a hashed subplan.
func (postgresDialect) excludeIDs(ids []int64, next int) (string, []any) {
	return " AND o.id NOT IN (SELECT unnest($" + strconv.Itoa(next) + "::bigint[]))", []any{ids}
}

// publishedSet uses the database's clock, as deletePublished compares it.
func (postgresDialect) publishedSet() (string, []any) { return postgresPublishedSet, nil }

// postgresPublishedSet is the SET clause of the published mark.
const postgresPublishedSet = "published_at = now()"

// updateFenced commits without waiting for the WAL flush
// (synchronous_commit off): a mark lost in a database crash only publishes
// the message again.
func (d postgresDialect) updateFenced(ctx context.Context, db Executor, t storeTables, owner, set string, setArgs []any, ids []int64, events *eventRange) error {
	if len(ids) == 0 {
		return nil
	}
	lo, hi := slices.Min(ids), slices.Max(ids)
	args := append(setArgs, ids, owner, lo, hi)
	if events != nil {
		args = append(args, events.lo, events.hi)
	}
	_, err := db.ExecContext(ctx, d.fencedSQL(t, set, len(setArgs), events != nil), args...)
	return err
}

// fencedSQL is updateFenced's statement: its arguments are set's (n of
// them), then the ids, the owner, the lowest and the highest of the ids,
// and, when ranged, the lowest and the highest event id.
//
// The bounds on id keep the statement on the primary key whatever the
// planner's statistics say. Run through a driver's prepared statement, as
// pgx runs it, PostgreSQL plans it generically after five runs and keeps
// that plan until the table's statistics change; planned for an "o.id =
// ANY($1)" alone on a table it believes a few pages long (new and never
// analyzed, or analyzed nearly empty), the generic plan is a sequential
// scan, and a relay that started on such a table went on reading all of
// it at every mark as it grew, until autovacuum's next ANALYZE (never,
// where autovacuum is off): 4 times the time and twice the buffers per
// mark at 8,000 rows in relaybench. A range of ids costs the planner's
// default guess a fraction of the table, so the index wins. The owner's
// shards are read once (an InitPlan) and checked as a filter: joined, as
// they were, the range's smaller row estimate made the planner loop over
// the leases for each row (2 ms more per 1,000-row mark).
func (postgresDialect) fencedSQL(t storeTables, set string, n int, ranged bool) string {
	if t.queue != "" {
		return queueFencedSQL(t, set, n)
	}
	q := `UPDATE ` + t.table + ` AS o SET ` + set + `
		FROM (SELECT set_config('synchronous_commit', 'off', true)) AS sc`
	if set == "" {
		q = `DELETE FROM ` + t.table + ` AS o USING (SELECT set_config('synchronous_commit', 'off', true)) AS sc`
	}
	arg := func(i int) string { return "$" + strconv.Itoa(n+i) }
	q += `
		WHERE o.id = ANY(` + arg(1) + `) AND o.id BETWEEN ` + arg(3) + ` AND ` + arg(4) + ` AND o.published_at IS NULL
		AND o.shard = ANY(ARRAY(SELECT shard FROM ` + t.leases + ` WHERE owner = ` + arg(2) + `))`
	if ranged {
		// Run-time partition pruning: the UPDATE reads the one or two
		// partitions of the batch's events, not every partition's index.
		q += ` AND o.event_id BETWEEN ` + arg(5) + `::uuid AND ` + arg(6) + `::uuid`
	}
	return q
}

// queueFencedSQL is fencedSQL with a queue, its arguments the same. The
// published mark deletes the rows' entries from the queue, fenced by the
// owner's shards as the UPDATE is, and does not write the rows: only those
// with a retry schedule, whose ids are its one set argument, get
// published_at and lose their next_attempt_at, which takes them out of
// the blocked index. With DeletePublished (set empty) it deletes the rows
// with their entries. A failure is recorded on the rows
// as without a queue; one that parks a row also takes it out of the queue.
func queueFencedSQL(t storeTables, set string, n int) string {
	arg := func(i int) string { return "$" + strconv.Itoa(n+i) }
	// The ids are a filter on a range of the queue's key, looked up in a
	// hash of them (a NOT IN over a subquery is planned as a hashed
	// subplan, and is not turned into a join): an "= ANY" of the ids would
	// be the index's condition, one descent of the key per id (pgbench,
	// 1,000-row mark: 0.75 against 1.1 ms). The queue holds the pending
	// rows alone, so the range holds little more than the batch: the
	// entries of rows of other shards, or held back, between its ids.
	dequeue := `DELETE FROM ` + t.queue + ` AS q USING (SELECT set_config('synchronous_commit', 'off', true)) AS sc
			WHERE q.qid BETWEEN ` + arg(3) + ` AND ` + arg(4) + ` AND NOT (q.qid NOT IN (SELECT unnest(` + arg(1) + `::bigint[])))
			AND q.qshard = ANY(ARRAY(SELECT shard FROM ` + t.leases + ` WHERE owner = ` + arg(2) + `))`
	rows := `o.id = ANY(ARRAY(SELECT qid FROM d)) AND o.id BETWEEN ` + arg(3) + ` AND ` + arg(4)
	switch {
	case set == "":
		return `WITH d AS (` + dequeue + ` RETURNING q.qid) DELETE FROM ` + t.table + ` AS o WHERE ` + rows
	case set == postgresPublishedSet && n == 0:
		return dequeue
	case set == postgresPublishedSet:
		// $1: the ids of the rows with a retry schedule (claimToken).
		return `WITH d AS (` + dequeue + ` RETURNING q.qid) UPDATE ` + t.table + ` AS o SET published_at = now(), next_attempt_at = NULL
		WHERE o.id = ANY(ARRAY(SELECT qid FROM d WHERE qid = ANY($1))) AND o.id BETWEEN ` + arg(3) + ` AND ` + arg(4)
	}
	update := `UPDATE ` + t.table + ` AS o SET ` + set + `
		FROM (SELECT set_config('synchronous_commit', 'off', true)) AS sc
		WHERE o.id = ANY(` + arg(1) + `) AND o.id BETWEEN ` + arg(3) + ` AND ` + arg(4) + ` AND o.published_at IS NULL
		AND o.shard = ANY(ARRAY(SELECT shard FROM ` + t.leases + ` WHERE owner = ` + arg(2) + `))
		AND o.id IN (SELECT qid FROM ` + t.queue + `)`
	if !strings.Contains(set, "parked_at") {
		return update
	}
	return `WITH u AS (` + update + ` RETURNING o.id, o.parked_at)
		DELETE FROM ` + t.queue + ` WHERE qid = ANY(ARRAY(SELECT id FROM u WHERE parked_at IS NOT NULL))`
}

func (postgresDialect) failureSet(kind failureKind, text string, cfg StoreConfig) (string, []any) {
	delay, maxDelay := cfg.RetryDelay.Microseconds(), cfg.MaxRetryDelay.Microseconds()
	switch kind {
	case failPark:
		return `attempts = o.attempts + 1, last_error = $1, parked_at = now()`, []any{text}
	case failAttempt:
		return `attempts = o.attempts + 1, last_error = $1,
			next_attempt_at = now() + least($2::float8 * power(2, least(o.attempts, 30)), $3::float8) * interval '1 microsecond',
			parked_at = CASE WHEN $4::int > 0 AND o.attempts + 1 >= $4::int THEN now() END`,
			[]any{text, delay, maxDelay, cfg.MaxAttempts}
	default:
		return `last_error = $1, next_attempt_at = now() + $2 * interval '1 microsecond'`, []any{text, delay}
	}
}

// deletePublished is one statement. Published rows are mostly the oldest:
// it walks the primary key from the start rather than keep an index on
// published_at, which would cost every mark an index insertion. FOR UPDATE
// SKIP LOCKED passes over rows another transaction holds (a Replay), and
// the outer condition is checked again on the row's latest version, so a
// row replayed meanwhile is not deleted. Writers insert new rows and the
// relay updates only pending ones: neither waits for it, nor it for them.
func (postgresDialect) deletePublished(ctx context.Context, db DB, t storeTables, olderThan time.Duration, batch int, maxID int64) (int64, error) {
	const cutoff = `now() - $1 * interval '1 microsecond'`
	published := `published_at < ` + cutoff
	if t.queue != "" {
		// Rows the queue's mark did not write; one turned pending again
		// has next_attempt_at set (see requeue), so the recheck on the
		// latest version of a row locked after a concurrent Replay or
		// Unpark does not delete it.
		published = `(` + published + ` OR (published_at IS NULL AND parked_at IS NULL AND next_attempt_at IS NULL
			AND created_at < ` + cutoff + ` AND NOT EXISTS (SELECT 1 FROM ` + t.queue + ` WHERE qid = id)))`
	}
	res, err := db.ExecContext(ctx, `DELETE FROM `+t.table+` WHERE id IN (SELECT id FROM `+t.table+`
		WHERE `+published+` AND ($3 <= 0 OR id <= $3)
		ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
		AND `+published, olderThan.Microseconds(), batch, maxID)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (postgresDialect) pendingAge(from string) string {
	return `COALESCE(EXTRACT(EPOCH FROM now() - (SELECT min(created_at) ` + from + `)), 0)`
}

// wakeSQL: RequestWake moves the wake-up register's deadline to at least
// now plus $1 milliseconds; a claim that finds messages, or a release,
// clears it (other waiting relays set it again at their next renewal).
func (postgresDialect) wakeSQL(t storeTables) (string, string) {
	seq := "'" + t.wake + "'::regclass"
	return `SELECT setval(` + seq + `, greatest(COALESCE(pg_sequence_last_value(` + seq + `), 0), (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $1))`,
		`SELECT setval(` + seq + `, 0)`
}

func (postgresDialect) secondsSince(expr string) string {
	return `EXTRACT(EPOCH FROM now() - ` + expr + `)`
}

func (postgresDialect) timeCompare(col, op string) string { return col + " " + op + " ?" }
func (postgresDialect) timeArg(t time.Time) any           { return t.UTC() }

// postgresLockKey is the SQL of the bigint key of the session lock of the
// owner in expr (see session.go), for the store's table in $T.
func postgresLockKey(t storeTables, expr string) string {
	return `('x' || substr(md5(concat_ws(chr(31), current_schema(), '` + t.table + `'::text, ` + expr + `)), 1, 16))::bit(64)::bigint`
}

// lockSession takes the owner's session-level advisory lock; the session
// is the backend's pid.
func (postgresDialect) lockSession(ctx context.Context, conn Conn, t storeTables, owner string) (bool, int64, error) {
	var got bool
	var pid int64
	err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(`+postgresLockKey(t, "$1::text")+`), pg_backend_pid()`, owner).Scan(&got, &pid)
	return got, pid, err
}

// unlockSession releases the owner's session-level advisory lock.
func (postgresDialect) unlockSession(ctx context.Context, conn Conn, t storeTables, owner string) error {
	_, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+postgresLockKey(t, "$1::text")+`)`, owner)
	return err
}

// endSession terminates backend pid if it holds owner's lock.
func (postgresDialect) endSession(ctx context.Context, q Executor, t storeTables, owner string, pid int64) error {
	_, err := q.ExecContext(ctx, `SELECT pg_terminate_backend(l.pid) FROM pg_locks l
		CROSS JOIN (SELECT `+postgresLockKey(t, "$1::text")+` AS k) u
		WHERE l.pid = $2 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = ((u.k >> 32) & 4294967295)::oid AND l.objid = (u.k & 4294967295)::oid`, owner, pid)
	return err
}

// lockStates reads the advisory locks in pg_locks (a bigint key shows as
// classid, its high half, objid, its low half, and objsubid 1), which
// takes no lock.
func (postgresDialect) lockStates(ctx context.Context, q Executor, t storeTables, owner string) (map[string]lockState, error) {
	rows, err := q.QueryContext(ctx, `SELECT u.owner, EXISTS (SELECT 1 FROM pg_locks l
			WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid = ((u.k >> 32) & 4294967295)::oid AND l.objid = (u.k & 4294967295)::oid),
			COALESCE((SELECT r.session_lock FROM `+t.relays+` r WHERE r.owner = u.owner), FALSE)
		FROM (SELECT o.owner, `+postgresLockKey(t, "o.owner")+` AS k FROM (
			SELECT owner FROM `+t.relays+` WHERE expires_at > now() AND owner <> $1
			UNION SELECT owner FROM `+t.leases+` WHERE owner IS NOT NULL AND owner <> $1 AND expires_at > now()) o) u`, owner)
	return scanLockStates(rows, err)
}
