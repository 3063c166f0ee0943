package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// This file is the operator's view of the outbox table: listing and reading
// rows, counts per topic and event type, and replaying published rows. The
// operator command (adapters/cmd/outbox) and the web dashboard are built on
// it; [Store.Unpark], [Store.Discard] and [Store.DeletePublished] complete it.

// ErrNotFound is wrapped by [Store.Entry]'s error when no row has the id.
var ErrNotFound = errors.New("sqlstore: no such outbox row")

// ErrInvalidQuery is wrapped by the errors of [Store.Entries] and
// [Store.Replay] for a query or range they cannot run (an unknown state, a
// negative limit, a replay without bounds).
var ErrInvalidQuery = errors.New("sqlstore: invalid admin query")

// State is where an outbox row is in its life.
type State string

// The states of an outbox row. An [Entry] is in exactly one of them; a
// [Query] for [StatePending] also matches [StateRetrying] rows (as
// [relay.Stats] counts them).
const (
	// StatePending: not yet published, never failed.
	StatePending State = "pending"
	// StateRetrying: not yet published, failed at least once (attempts >
	// 0), waiting for its next attempt.
	StateRetrying State = "retrying"
	// StateParked: set aside after a permanent failure or too many
	// attempts, until [Store.Unpark] or [Store.Discard].
	StateParked State = "parked"
	// StatePublished: the broker acknowledged it; kept until retention
	// ([Store.DeletePublished], [Retention]) deletes it.
	StatePublished State = "published"
)

// ParseState returns the state named s ("" is no state: every row). Another
// name returns an error wrapping [ErrInvalidQuery].
func ParseState(s string) (State, error) {
	switch st := State(s); st {
	case "", StatePending, StateRetrying, StateParked, StatePublished:
		return st, nil
	}
	return "", fmt.Errorf("%w: unknown state %q (pending, retrying, parked, published)", ErrInvalidQuery, s)
}

// Entry is one outbox row as an operator sees it.
type Entry struct {
	runtime.OutboxMessage
	// State is the row's state.
	State State
	// LastError is the error of the row's last failed attempt, or "".
	LastError string
	// NextAttemptAt is when a failed row is tried again (zero when unset).
	NextAttemptAt time.Time
	// PublishedAt is when the broker acknowledged the row (zero when not
	// published).
	PublishedAt time.Time
	// ParkedAt is when the row was parked (zero when not parked).
	ParkedAt time.Time
	// BlockedBy is, for a pending or retrying row, the id of the earliest
	// parked row of its aggregate before it: the relay holds the row back
	// until an operator retries or discards that one. Zero when nothing
	// holds it back (and for published and parked rows).
	BlockedBy int64
}

// Query selects outbox rows for [Store.Entries]. Every set field narrows
// the selection; the zero value lists the first rows of the table.
type Query struct {
	// State keeps the rows in that state; "" keeps every row.
	// [StatePending] includes [StateRetrying].
	State State
	// Topic, EventType, AggregateType and AggregateID keep the rows whose
	// column equals them, when set.
	Topic, EventType, AggregateType, AggregateID string
	// EventID keeps the row of that event, when not uuid.Nil.
	EventID uuid.UUID
	// AfterID keeps rows whose id is greater (keyset pagination: pass the
	// last id of the previous page). Rows come in ascending id order.
	AfterID int64
	// Limit is the page size. Default (0): 100; values above 1,000 are
	// read as 1,000.
	Limit int
}

// Page sizes of [Store.Entries].
const (
	// DefaultQueryLimit is the page size of a [Query] whose Limit is 0.
	DefaultQueryLimit = 100
	// MaxQueryLimit is the largest page size; larger Limits are read as it.
	MaxQueryLimit = 1000
)

const entryColumns = selectColumns + ", last_error, next_attempt_at, published_at, parked_at"

// entrySelect is the SELECT list and FROM of the rows of the table for
// Entries and Entry: entryColumns and, for BlockedBy, the earliest parked
// row of the same aggregate before each row (the table is aliased o).
// With a queue, a row the mark did not write (neither queued nor parked,
// published_at NULL) reads as published at the epoch, which scanEntry
// turns into a zero PublishedAt.
func entrySelect(t storeTables) string {
	cols := entryColumns
	if t.queue != "" {
		cols = strings.Replace(cols, "published_at", `COALESCE(published_at, CASE WHEN parked_at IS NULL
			AND NOT EXISTS (SELECT 1 FROM `+t.queue+` WHERE qid = o.id) THEN 'epoch'::timestamptz END)`, 1)
	}
	return `SELECT ` + cols + `, (SELECT MIN(p.id) FROM ` + t.table + ` p
		WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
		AND p.parked_at IS NOT NULL AND p.published_at IS NULL AND p.id < o.id) FROM ` + t.table + ` o`
}

// pendingCond is the WHERE condition of the pending rows (columns
// unqualified, or of the table aliased o): with a queue, those it holds.
func pendingCond(t storeTables) string {
	const c = "published_at IS NULL AND parked_at IS NULL"
	if t.queue != "" {
		return c + " AND EXISTS (SELECT 1 FROM " + t.queue + " WHERE qid = id)"
	}
	return c
}

// publishedCond is the WHERE condition of the published rows: with a
// queue, also those neither queued nor parked.
func publishedCond(t storeTables) string {
	if t.queue != "" {
		return "(published_at IS NOT NULL OR (parked_at IS NULL AND NOT EXISTS (SELECT 1 FROM " + t.queue + " WHERE qid = id)))"
	}
	return "published_at IS NOT NULL"
}

// statsByTypeQuery is [Store.StatsByType]'s statement.
func statsByTypeQuery(d dialect, t storeTables) string {
	return `SELECT topic, event_type,
		SUM(CASE WHEN parked_at IS NULL THEN 1 ELSE 0 END),
		SUM(CASE WHEN parked_at IS NULL AND attempts > 0 THEN 1 ELSE 0 END),
		SUM(CASE WHEN parked_at IS NOT NULL THEN 1 ELSE 0 END),
		` + d.secondsSince(`MIN(CASE WHEN parked_at IS NULL THEN created_at END)`) + `
		FROM ` + unpublishedRows(t) + `
		GROUP BY topic, event_type ORDER BY topic, event_type`
}

// unpublishedRows is a FROM of the pending and parked rows. With a queue
// it reads the pending rows from the queue, each by its key (queueWalk),
// and the parked ones through their index. A condition on the table
// alone (published_at IS NULL AND (parked_at IS NOT NULL OR EXISTS (the
// queue's entry))), which no index of the table answers, read all of it,
// published history included: 650 ms on 200,000 rows.
func unpublishedRows(t storeTables) string {
	if t.queue == "" {
		return t.table + ` WHERE published_at IS NULL`
	}
	return `(SELECT o.* FROM ` + queueWalk(t) + `
			WHERE o.published_at IS NULL AND o.parked_at IS NULL
		UNION ALL
		SELECT * FROM ` + t.table + ` WHERE parked_at IS NOT NULL AND published_at IS NULL) u`
}

// requeue wraps an UPDATE of rows that turn pending so that, with a
// queue, they are queued in the same statement; its RowsAffected is then
// the rows queued, or found queued (a row pgcdc parked keeps its entry). Such a row's next_attempt_at is the epoch rather than
// NULL (not a retry, it holds nothing back): retention then tells it from
// a row the mark published, even on a version it locked after this
// statement committed (see postgresDialect.deletePublished), and the mark
// gives it published_at when it goes out again.
func requeue(t storeTables, update string) string {
	if t.queue == "" {
		return update
	}
	update = strings.Replace(update, "next_attempt_at = NULL", "next_attempt_at = 'epoch'", 1)
	return `WITH u AS (` + update + ` RETURNING id, shard)
		INSERT INTO ` + t.queue + ` (qid, qshard) SELECT id, shard FROM u
		ON CONFLICT (qid) DO UPDATE SET qshard = EXCLUDED.qshard`
}

// Entries returns the rows q selects, in ascending id order. Index use: a
// state of pending, retrying or parked walks that state's partial index (on
// MySQL the (published_at, parked_at, id) index), an event id uses the
// unique index, and every other filter is checked along the primary key,
// so a filter that matches few rows of a large table reads much of it
// (search by event id where you can).
func (s *Store) Entries(ctx context.Context, q Query) ([]Entry, error) {
	if _, err := ParseState(string(q.State)); err != nil {
		return nil, fmt.Errorf("sqlstore: entries: %w", err)
	}
	if q.Limit < 0 || q.AfterID < 0 {
		return nil, fmt.Errorf("sqlstore: entries: %w: negative limit %d or after id %d", ErrInvalidQuery, q.Limit, q.AfterID)
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultQueryLimit
	}
	limit = min(limit, MaxQueryLimit)
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "?", s.dialect.ph(len(args))))
	}
	t, err := s.tablesNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: entries: %w", err)
	}
	if cond := stateCondition(t, q.State); cond != "" {
		where = append(where, cond)
	}
	if q.AfterID > 0 {
		add("id > ?", q.AfterID)
	}
	if q.Topic != "" {
		add("topic = ?", q.Topic)
	}
	if q.EventType != "" {
		add("event_type = ?", q.EventType)
	}
	if q.AggregateType != "" {
		add("aggregate_type = ?", q.AggregateType)
	}
	if q.AggregateID != "" {
		add("aggregate_id = ?", q.AggregateID)
	}
	if q.EventID != uuid.Nil {
		add("event_id = ?", q.EventID.String())
	}
	stmt := entrySelect(t)
	if len(where) > 0 {
		stmt += ` WHERE ` + strings.Join(where, " AND ")
	}
	stmt += fmt.Sprintf(` ORDER BY id LIMIT %d`, limit)
	rows, err := s.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: entries: %w", err)
	}
	defer rows.Close()
	out := []Entry{}
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: entries: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: entries: %w", err)
	}
	return out, nil
}

// stateCondition is the WHERE condition of a state, or "".
func stateCondition(t storeTables, st State) string {
	pending := pendingCond(t)
	switch st {
	case StatePending:
		return pending
	case StateRetrying:
		return pending + " AND attempts > 0"
	case StateParked:
		return "parked_at IS NOT NULL AND published_at IS NULL"
	case StatePublished:
		return publishedCond(t)
	}
	return ""
}

// Entry returns the row with the given id, or an error wrapping
// [ErrNotFound].
func (s *Store) Entry(ctx context.Context, id int64) (Entry, error) {
	t, err := s.tablesNow(ctx)
	if err != nil {
		return Entry{}, fmt.Errorf("sqlstore: entry %d: %w", id, err)
	}
	rows, err := s.db.QueryContext(ctx, entrySelect(t)+` WHERE id = `+s.dialect.ph(1), id)
	if err != nil {
		return Entry{}, fmt.Errorf("sqlstore: entry %d: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Entry{}, fmt.Errorf("sqlstore: entry %d: %w", id, err)
		}
		return Entry{}, fmt.Errorf("sqlstore: entry %d: %w", id, ErrNotFound)
	}
	e, err := scanEntry(rows)
	if err != nil {
		return Entry{}, fmt.Errorf("sqlstore: entry %d: %w", id, err)
	}
	return e, nil
}

// scanEntry reads one row of entrySelect.
func scanEntry(rows Rows) (Entry, error) {
	var (
		r                     RowValues
		headers, lastError    sql.NullString
		nextAttempt           any // a time, or unix microseconds on SQLite
		publishedAt, parkedAt sql.NullTime
		blockedBy             sql.NullInt64
	)
	if err := rows.Scan(&r.ID, &r.EventID, &r.EventType, &r.EventVersion, &r.AggregateType, &r.AggregateID,
		&r.Topic, &r.Payload, &headers, &r.OccurredAt, &r.CreatedAt, &r.Attempts,
		&lastError, &nextAttempt, &publishedAt, &parkedAt, &blockedBy); err != nil {
		return Entry{}, fmt.Errorf("scan: %w", err)
	}
	r.Headers = headers.String
	m, err := DecodeRow(r)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{OutboxMessage: m, LastError: lastError.String}
	switch v := nextAttempt.(type) {
	case time.Time:
		if v.Unix() != 0 { // the epoch: turned pending again (requeue)
			e.NextAttemptAt = v.UTC()
		}
	case int64:
		e.NextAttemptAt = time.UnixMicro(v).UTC()
	case nil:
	default:
		return Entry{}, fmt.Errorf("row %d: next_attempt_at: unexpected %T", r.ID, nextAttempt)
	}
	if publishedAt.Valid && publishedAt.Time.Unix() != 0 {
		e.PublishedAt = publishedAt.Time.UTC() // the epoch: published by a queue's mark (entrySelect)
	}
	if parkedAt.Valid {
		e.ParkedAt = parkedAt.Time.UTC()
	}
	switch {
	case publishedAt.Valid:
		e.State = StatePublished
	case parkedAt.Valid:
		e.State = StateParked
	case r.Attempts > 0:
		e.State = StateRetrying
	default:
		e.State = StatePending
	}
	if e.State == StatePending || e.State == StateRetrying {
		e.BlockedBy = blockedBy.Int64
	}
	return e, nil
}

// GroupStats is the state of one topic and event type's unpublished rows.
type GroupStats struct {
	Topic, EventType string
	relay.Stats
}

// StatsByType returns [Store.Stats] per topic and event type, sorted by
// topic then event type, for the groups that have unpublished rows. Like
// Stats it reads only unpublished rows, in one query; on a large backlog it
// reads every one of them: call it at scrape intervals.
func (s *Store) StatsByType(ctx context.Context) ([]GroupStats, error) {
	t, err := s.tablesNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: stats by type: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, statsByTypeQuery(s.dialect, t))
	if err != nil {
		return nil, fmt.Errorf("sqlstore: stats by type: %w", err)
	}
	defer rows.Close()
	out := []GroupStats{}
	for rows.Next() {
		var (
			g       GroupStats
			seconds sql.NullFloat64
		)
		if err := rows.Scan(&g.Topic, &g.EventType, &g.Pending, &g.Retrying, &g.Parked, &seconds); err != nil {
			return nil, fmt.Errorf("sqlstore: stats by type: scan: %w", err)
		}
		if seconds.Float64 > 0 {
			g.OldestPending = time.Duration(seconds.Float64 * float64(time.Second))
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: stats by type: %w", err)
	}
	return out, nil
}

// ReplayRange selects the published rows [Store.Replay] puts back in the
// queue. At least one of FromID, ToID, Since and Until must be set.
type ReplayRange struct {
	// FromID and ToID bound the rows' ids, both inclusive; 0 is unbounded.
	FromID, ToID int64
	// Since (inclusive) and Until (exclusive) bound the rows' created_at
	// (the commit time, on the database's clock, the process's on SQLite);
	// the zero time is unbounded.
	Since, Until time.Time
	// Topic keeps only the rows of that topic, when set.
	Topic string
}

// Validate reports whether r is a range [Store.Replay] can run.
func (r ReplayRange) Validate() error {
	switch {
	case r.FromID == 0 && r.ToID == 0 && r.Since.IsZero() && r.Until.IsZero():
		return fmt.Errorf("%w: replay needs an id or time bound (FromID, ToID, Since, Until)", ErrInvalidQuery)
	case r.FromID < 0 || r.ToID < 0:
		return fmt.Errorf("%w: replay: negative id bound", ErrInvalidQuery)
	case r.ToID != 0 && r.FromID > r.ToID:
		return fmt.Errorf("%w: replay: FromID %d is after ToID %d", ErrInvalidQuery, r.FromID, r.ToID)
	case !r.Since.IsZero() && !r.Until.IsZero() && !r.Since.Before(r.Until):
		return fmt.Errorf("%w: replay: Since %s is not before Until %s", ErrInvalidQuery,
			r.Since.Format(time.RFC3339Nano), r.Until.Format(time.RFC3339Nano))
	}
	return nil
}

// Replay puts the published rows of r back in the queue (published_at,
// attempts, last_error and the retry schedule cleared) and returns how many
// it replayed: the relay then publishes them again through its usual
// machinery, each aggregate's rows in id order and before the aggregate's
// newer pending rows, as it would have the first time. Use it after a
// broker lost data; consumers that keep an inbox (package
// runtime/consumer) apply each event once whatever the broker delivers
// again, as long as their inbox still holds its marker (replay no further
// back than the inbox's retention). Pending and parked rows are left
// alone. Replayed rows keep their created_at, so until they are published
// again they count in [Store.Stats] as pending since their first commit
// (the oldest-pending age, and the health and dashboard views built on it,
// jump), and their commit-to-publish lag is measured from it.
//
// The whole range turns pending in one statement, so a relay sees all of
// it or none, and a replay that fails changes nothing. The statement holds
// the range's rows until it ends; split a range of millions of rows by id. Ranges by
// id walk the primary key; ranges by time or topic read published rows
// along it.
func (s *Store) Replay(ctx context.Context, r ReplayRange) (int64, error) {
	if err := r.Validate(); err != nil {
		return 0, fmt.Errorf("sqlstore: %w", err)
	}
	t, err := s.tablesNow(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: replay: %w", err)
	}
	var (
		where = []string{publishedCond(t)}
		args  []any
	)
	add := func(cond string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(cond, "?", s.dialect.ph(len(args))))
	}
	if r.FromID > 0 {
		add("id >= ?", r.FromID)
	}
	if r.ToID > 0 {
		add("id <= ?", r.ToID)
	}
	if !r.Since.IsZero() {
		add(s.dialect.timeCompare("created_at", ">="), s.dialect.timeArg(r.Since))
	}
	if !r.Until.IsZero() {
		add(s.dialect.timeCompare("created_at", "<"), s.dialect.timeArg(r.Until))
	}
	if r.Topic != "" {
		add("topic = ?", r.Topic)
	}
	// One statement: the range turns pending atomically. On MySQL it runs
	// under READ COMMITTED: InnoDB then keeps locks only on the rows it
	// changes and takes no gap locks, where REPEATABLE READ would hold every
	// row it scans (pending ones included, which the relay marks) and the
	// insert position until the statement ends.
	var opts *sql.TxOptions
	if s.dialect.name() == MySQL {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: replay: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	res, err := tx.ExecContext(ctx, requeue(t, `UPDATE `+s.table+` SET published_at = NULL, attempts = 0, last_error = NULL,
		next_attempt_at = NULL, parked_at = NULL WHERE `+strings.Join(where, " AND ")), args...)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: replay: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: replay: rows affected: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("sqlstore: replay: commit: %w", err)
	}
	return n, nil
}

// Unpark puts parked messages back in the queue with their attempts reset,
// for an operator who fixed what made them fail, and returns how many it
// unparked. A parked message held its aggregate's later messages back, so
// it is published before them.
func (s *Store) Unpark(ctx context.Context, ids ...int64) (int64, error) {
	t, err := s.tablesNow(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: unpark: %w", err)
	}
	n, err := s.execIDs(ctx, requeue(t, `UPDATE `+s.table+` SET parked_at = NULL, attempts = 0, next_attempt_at = NULL
		WHERE parked_at IS NOT NULL AND published_at IS NULL AND id IN (%s)`), ids)
	if err != nil {
		return n, fmt.Errorf("sqlstore: unpark: %w", err)
	}
	return n, nil
}

// Discard deletes parked messages that will never be published (an event
// too large for the broker, say), so their aggregates' later messages go
// out, and returns how many it deleted. Consumers never see the discarded
// events.
func (s *Store) Discard(ctx context.Context, ids ...int64) (int64, error) {
	n, err := s.execIDs(ctx, `DELETE FROM `+s.table+` WHERE parked_at IS NOT NULL AND published_at IS NULL AND id IN (%s)`, ids)
	if err != nil {
		return n, fmt.Errorf("sqlstore: discard: %w", err)
	}
	return n, nil
}

// execIDs runs query, whose %s takes a list of placeholders, for ids in
// chunks, and returns the rows affected.
func (s *Store) execIDs(ctx context.Context, query string, ids []int64) (int64, error) {
	return execIDs(ctx, s.db, s.dialect, query, ids)
}

// execIDs runs query on q in dialect d, as Store.execIDs does.
func execIDs(ctx context.Context, q Executor, d dialect, query string, ids []int64) (int64, error) {
	var total int64
	for start := 0; start < len(ids); start += 500 {
		part := ids[start:min(start+500, len(ids))]
		args := make([]any, len(part))
		phs := make([]string, len(part))
		for i, id := range part {
			args[i] = id
			phs[i] = d.ph(i + 1)
		}
		res, err := q.ExecContext(ctx, fmt.Sprintf(query, strings.Join(phs, ", ")), args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// Stats reads the state of the outbox table, for monitoring: how many
// messages are pending, how long the oldest has been waiting (on the
// database's clock, the process's on SQLite), and how many failed or were
// parked (see [Store.Unpark] and [Store.Discard]). It reads it with one query over the pending and
// parked rows' partial indexes; published rows are not read. On a large
// backlog it counts every pending row: call it at scrape intervals, not per
// message.
func (s *Store) Stats(ctx context.Context) (relay.Stats, error) {
	t, err := s.tablesNow(ctx)
	if err != nil {
		return relay.Stats{}, fmt.Errorf("sqlstore: stats: %w", err)
	}
	pending := `FROM ` + s.table + ` WHERE ` + pendingCond(t)
	age := s.dialect.pendingAge(pending)
	q := `SELECT (SELECT count(*) ` + pending + `),
		(SELECT count(*) ` + pending + ` AND attempts > 0),
		(SELECT count(*) FROM ` + s.table + ` WHERE parked_at IS NOT NULL AND published_at IS NULL),
		` + age
	var st relay.Stats
	var seconds float64
	if err := s.db.QueryRowContext(ctx, q).Scan(&st.Pending, &st.Retrying, &st.Parked, &seconds); err != nil {
		return relay.Stats{}, fmt.Errorf("sqlstore: stats: %w", err)
	}
	if seconds > 0 {
		st.OldestPending = time.Duration(seconds * float64(time.Second))
	}
	return st, nil
}
