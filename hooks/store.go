package hooks

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// StoreConfig configures a [Store]. The zero value is a valid configuration.
type StoreConfig struct {
	// Table is the outbox table; it must match the plugin's. Default:
	// [DefaultTable].
	Table string

	// RetryDelay is how long a message that failed to publish waits before
	// it is claimed again; the delay doubles with each failed attempt, up
	// to MaxRetryDelay. Its aggregate's later messages wait behind it, so
	// the aggregate's order holds; other aggregates go on. The schedule is
	// computed with the database's clock. Default: 1s.
	RetryDelay time.Duration

	// MaxRetryDelay caps RetryDelay's doubling. Default: 5m.
	MaxRetryDelay time.Duration

	// MaxAttempts parks a message that has failed to publish this many
	// times, if it fails again while other messages of its claim were
	// published (so a broker outage, which fails everything, parks
	// nothing). A message whose failure the publisher marks permanent
	// ([runtime.PermanentError]: too large for the broker, say) is parked
	// at its first failure whatever MaxAttempts says. A parked message is
	// no longer claimed and no longer holds its aggregate back; it keeps
	// last_error and parked_at for an operator, and [Store.Unpark] puts it
	// back. Default: 0, never park for transient failures.
	MaxAttempts int
}

func (c *StoreConfig) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = 5 * time.Minute
	}
}

// Validate reports whether the configuration is usable.
func (c StoreConfig) Validate() error {
	switch {
	case c.RetryDelay < 0 || c.MaxRetryDelay < 0 || c.MaxAttempts < 0:
		return fmt.Errorf("hooks: store config: RetryDelay, MaxRetryDelay and MaxAttempts must not be negative")
	case c.Table != "":
		return validTable(c.Table)
	}
	return nil
}

// Store is the outbox table as the relay (package runtime/relay) sees it: it
// claims pending rows, marks them published, and on PostgreSQL wakes the
// relay through LISTEN/NOTIFY. It satisfies relay.Store and relay.Notifier.
//
// On PostgreSQL several relays may share one Store's table: a claim locks its
// rows with FOR UPDATE SKIP LOCKED inside a transaction that lasts until the
// batch is marked, and a claim leaves out the messages of an aggregate whose
// earlier message another claim holds, so one aggregate's messages are
// published in order however many relays run. On SQLite, which has no row
// locks, claims are exclusive within one process; run one relay process per
// SQLite database.
//
// A Store is safe for concurrent use.
type Store struct {
	db      *sql.DB
	dialect dialect
	table   string
	cfg     StoreConfig

	pinMu  sync.Mutex // held while a claim uses pinned
	pinned *sql.Conn  // the connection claims reuse, so a relay never waits for the pool

	mu          sync.Mutex // guards the SQLite claim sets
	claimed     map[int64]bool
	claimedAggs map[aggKey]int
}

// NewStore returns a store on db's connection pool. A store keeps one
// connection of the pool for its claims, and [Store.Listen] another for as
// long as it listens; size the pool (SetMaxOpenConns) for them, and call
// [Store.Close] to give the claim connection back. It returns an error
// wrapping [ErrInvalidTable] or [ErrUnsupportedDialect] for a bad table name
// or dialect.
func NewStore(db *gorm.DB, cfg StoreConfig) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := dialectOf(db.Dialector.Name())
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("hooks: store: %w", err)
	}
	return &Store{db: sqlDB, dialect: d, table: cfg.Table, cfg: cfg}, nil
}

// Close releases the connection the store keeps for claims. The store stays
// usable; a later claim takes a connection again. It does not close db.
func (s *Store) Close() error {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if s.pinned == nil {
		return nil
	}
	err := s.pinned.Close()
	s.pinned = nil
	return err
}

const selectColumns = "id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, created_at, attempts"

// Claim claims up to limit pending rows in id order, calls publish with them,
// marks the ids publish returns as published and records a failed attempt on
// the others. See relay.Store for the full contract.
func (s *Store) Claim(ctx context.Context, limit int, publish func(ctx context.Context, msgs []runtime.OutboxMessage) ([]int64, error)) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("hooks: claim: limit %d must be positive", limit)
	}
	if s.dialect.name == "sqlite" {
		return s.claimSQLite(ctx, limit, publish)
	}
	if s.pinMu.TryLock() {
		n, err := s.claimPinned(ctx, limit, publish)
		s.pinMu.Unlock()
		if !errors.Is(err, errNotPgx) {
			return n, err
		}
	}
	// Another claim of this process holds the pinned connection (or the
	// driver is not pgx): claim through database/sql on a pool connection.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("hooks: claim: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit
	msgs, pendingUpTo, err := s.scanClaim(ctx, tx, s.claimSQL(), limit)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	if pendingUpTo > int64(len(msgs)) {
		if msgs, err = s.dropBlocked(ctx, tx, msgs); err != nil || len(msgs) == 0 {
			return 0, err
		}
	}
	return s.publishAndMark(ctx, func() (*sql.Tx, error) { return tx, nil }, msgs, publish)
}

// publishAndMark publishes a claimed batch, then marks it in the
// transaction that markTx returns and commits that transaction. It returns
// the batch size and publish's error, or the error that kept the marks from
// committing (then nothing is marked). A context cancelled while publishing
// marks nothing.
func (s *Store) publishAndMark(ctx context.Context, markTx func() (*sql.Tx, error), msgs []runtime.OutboxMessage,
	publish func(ctx context.Context, msgs []runtime.OutboxMessage) ([]int64, error)) (int, error) {
	published, perr := publish(ctx, msgs)
	if err := ctx.Err(); err != nil {
		return len(msgs), fmt.Errorf("hooks: claim: %w", err)
	}
	tx, err := markTx()
	if err != nil {
		return len(msgs), fmt.Errorf("hooks: claim: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit
	if err := s.mark(ctx, tx, msgs, published, perr); err != nil {
		return len(msgs), err
	}
	if err := tx.Commit(); err != nil {
		return len(msgs), fmt.Errorf("hooks: claim: commit marks: %w", err)
	}
	if perr != nil {
		return len(msgs), fmt.Errorf("hooks: claim: publish: %w", perr)
	}
	return len(msgs), nil
}

// dropBlocked keeps per-aggregate order across concurrent claims: it drops
// the claimed messages of every aggregate that still has an earlier pending
// message outside this claim — one that SKIP LOCKED passed over because
// another relay holds it. The dropped messages stay locked until this claim
// ends and are claimed again later, after the earlier ones were published.
// It runs only when the claim skipped rows, that is, while relays contend.
func (s *Store) dropBlocked(ctx context.Context, tx *sql.Tx, msgs []runtime.OutboxMessage) ([]runtime.OutboxMessage, error) {
	types, ids := claimedAggregates(msgs)
	rows, err := tx.QueryContext(ctx, s.firstPendingSQL(), types, ids)
	if err != nil {
		return nil, fmt.Errorf("hooks: claim: check aggregate order: %w", err)
	}
	defer rows.Close()
	return keepUnblocked(msgs, rows)
}

// rowScanner is what keepUnblocked reads: *sql.Rows or pgx.Rows.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// firstPendingSQL finds the first pending id of each aggregate given as two
// arrays (types, ids).
func (s *Store) firstPendingSQL() string {
	return `SELECT o.aggregate_type, o.aggregate_id, min(o.id) FROM ` + s.table + ` o
		JOIN unnest($1::text[], $2::text[]) AS c(aggregate_type, aggregate_id)
		ON o.aggregate_type = c.aggregate_type AND o.aggregate_id = c.aggregate_id
		WHERE o.published_at IS NULL AND o.parked_at IS NULL GROUP BY o.aggregate_type, o.aggregate_id`
}

// claimedAggregates lists the distinct aggregates of msgs as two arrays.
func claimedAggregates(msgs []runtime.OutboxMessage) (types, ids []string) {
	seen := make(map[aggKey]bool, len(msgs))
	for _, m := range msgs {
		a := aggKey{m.AggregateType, m.AggregateID}
		if !seen[a] {
			seen[a] = true
			types = append(types, a.typ)
			ids = append(ids, a.id)
		}
	}
	return types, ids
}

// keepUnblocked drops the messages of every aggregate whose first pending
// message (read from the rows of firstPendingSQL) comes before its first
// claimed one.
func keepUnblocked(msgs []runtime.OutboxMessage, rows rowScanner) ([]runtime.OutboxMessage, error) {
	firsts := map[aggKey]int64{}
	for rows.Next() {
		var a aggKey
		var first int64
		if err := rows.Scan(&a.typ, &a.id, &first); err != nil {
			return nil, fmt.Errorf("hooks: claim: check aggregate order: %w", err)
		}
		firsts[a] = first
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("hooks: claim: check aggregate order: %w", err)
	}
	firstClaimed := make(map[aggKey]int64, len(firsts))
	for _, m := range msgs {
		a := aggKey{m.AggregateType, m.AggregateID}
		if _, ok := firstClaimed[a]; !ok {
			firstClaimed[a] = m.ID
		}
	}
	kept := msgs[:0]
	for _, m := range msgs {
		a := aggKey{m.AggregateType, m.AggregateID}
		if first, ok := firsts[a]; !ok || first >= firstClaimed[a] {
			kept = append(kept, m)
		}
	}
	return kept, nil
}

func (s *Store) claimSQLite(ctx context.Context, limit int, publish func(ctx context.Context, msgs []runtime.OutboxMessage) ([]int64, error)) (int, error) {
	// SQLite has one writer and no row locks: claims are exclusive within
	// this process through the set of claimed ids and aggregates.
	s.mu.Lock()
	now := time.Now().UnixMicro()
	candidates, _, err := s.scanRows(ctx, s.db, `SELECT `+selectColumns+` FROM `+s.table+
		` WHERE published_at IS NULL AND parked_at IS NULL
		AND (aggregate_type, aggregate_id) NOT IN (`+s.waitingSQL(fmt.Sprint(now))+`)
		ORDER BY id LIMIT ?`, limit+len(s.claimed), false)
	if err != nil {
		s.mu.Unlock()
		return 0, err
	}
	var msgs []runtime.OutboxMessage
	held := map[aggKey]bool{} // aggregates in this claim
	for _, m := range candidates {
		a := aggKey{m.AggregateType, m.AggregateID}
		if s.claimed[m.ID] || s.claimedAggs[a] > 0 && !held[a] {
			continue
		}
		if len(msgs) == limit {
			break
		}
		held[a] = true
		msgs = append(msgs, m)
	}
	if s.claimed == nil {
		s.claimed, s.claimedAggs = map[int64]bool{}, map[aggKey]int{}
	}
	for _, m := range msgs {
		s.claimed[m.ID] = true
		s.claimedAggs[aggKey{m.AggregateType, m.AggregateID}]++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, m := range msgs {
			delete(s.claimed, m.ID)
			a := aggKey{m.AggregateType, m.AggregateID}
			if s.claimedAggs[a]--; s.claimedAggs[a] == 0 {
				delete(s.claimedAggs, a)
			}
		}
		s.mu.Unlock()
	}()
	if len(msgs) == 0 {
		return 0, nil
	}
	return s.publishAndMark(ctx, func() (*sql.Tx, error) { return s.db.BeginTx(ctx, nil) }, msgs, publish)
}

type aggKey struct{ typ, id string }

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (s *Store) scan(ctx context.Context, q querier, query string, limit int) ([]runtime.OutboxMessage, error) {
	msgs, _, err := s.scanRows(ctx, q, query, limit, false)
	return msgs, err
}

func (s *Store) scanClaim(ctx context.Context, q querier, query string, limit int) ([]runtime.OutboxMessage, int64, error) {
	msgs, extra, err := s.scanRows(ctx, q, query, limit, true)
	if len(extra) == 0 {
		return msgs, 0, err
	}
	return msgs, extra[0], err
}

// scanRows reads outbox rows (selectColumns, plus one int8 column when
// withFirst is set).
func (s *Store) scanRows(ctx context.Context, q querier, query string, limit int, withFirst bool) ([]runtime.OutboxMessage, []int64, error) {
	rows, err := q.QueryContext(ctx, query, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("hooks: claim: select pending: %w", err)
	}
	defer rows.Close()
	msgs := make([]runtime.OutboxMessage, 0, limit)
	var firsts []int64
	for rows.Next() {
		var (
			m        runtime.OutboxMessage
			id       string
			payload  []byte
			headers  []byte
			occurred time.Time
			created  time.Time
			first    sql.NullInt64
		)
		dest := []any{&m.ID, &id, &m.EventType, &m.EventVersion, &m.AggregateType, &m.AggregateID,
			&m.Topic, &payload, &headers, &occurred, &created, &m.Attempts}
		if withFirst {
			dest = append(dest, &first)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, fmt.Errorf("hooks: claim: scan: %w", err)
		}
		if m.EventID, err = uuid.Parse(id); err != nil {
			return nil, nil, fmt.Errorf("hooks: claim: row %d: event id %q: %w", m.ID, id, err)
		}
		if err := decodeHeaders(headers, &m); err != nil {
			return nil, nil, err
		}
		m.Payload = payload
		m.OccurredAt = occurred.UTC()
		m.CreatedAt = created.UTC()
		msgs = append(msgs, m)
		if withFirst {
			firsts = append(firsts, first.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("hooks: claim: select pending: %w", err)
	}
	return msgs, firsts, nil
}

// mark marks published ids and records a failed attempt on the rest.
func (s *Store) mark(ctx context.Context, tx *sql.Tx, msgs []runtime.OutboxMessage, published []int64, perr error) error {
	done, failed := splitPublished(msgs, published)
	set, args := "published_at = now()", []any(nil) // the database's clock, as DeletePublished compares it
	if s.dialect.name == "sqlite" {
		set, args = "published_at = ?", []any{time.Now().UTC()}
	}
	if err := s.updateIDs(ctx, tx, set, args, done); err != nil {
		return fmt.Errorf("hooks: claim: mark published: %w", err)
	}
	retry, park := failureHeads(msgs, failed, perr)
	set, args = s.failureSet(perr, len(done) > 0, false)
	if err := s.updateIDs(ctx, tx, set, args, retry); err != nil {
		return fmt.Errorf("hooks: claim: record failed attempt: %w", err)
	}
	set, args = s.failureSet(perr, len(done) > 0, true)
	if err := s.updateIDs(ctx, tx, set, args, park); err != nil {
		return fmt.Errorf("hooks: claim: park: %w", err)
	}
	return nil
}

// failureSet returns the SET clause (and its arguments, numbered from 1)
// that records a failed publish attempt: the error, the next attempt's time
// (RetryDelay doubling per attempt, capped at MaxRetryDelay, on the
// database's clock) and the parking: at once for a permanent failure
// (parkNow), or past MaxAttempts when others were published.
func (s *Store) failureSet(perr error, othersPublished, parkNow bool) (string, []any) {
	delay, maxDelay := s.cfg.RetryDelay.Microseconds(), s.cfg.MaxRetryDelay.Microseconds()
	if s.dialect.name == "postgres" {
		return `attempts = attempts + 1, last_error = $1,
			next_attempt_at = now() + least($2::float8 * power(2, least(attempts, 30)), $3::float8) * interval '1 microsecond',
			parked_at = CASE WHEN $6::bool OR ($4::int > 0 AND $5::bool AND attempts + 1 >= $4::int) THEN now() END`,
			[]any{failureText(perr), delay, maxDelay, s.cfg.MaxAttempts, othersPublished, parkNow}
	}
	now := time.Now()
	return `attempts = attempts + 1, last_error = ?,
			next_attempt_at = ? + min(? * (1 << min(attempts, 30)), ?),
			parked_at = CASE WHEN ? OR (? > 0 AND ? AND attempts + 1 >= ?) THEN ? END`,
		[]any{failureText(perr), now.UnixMicro(), delay, maxDelay, parkNow, s.cfg.MaxAttempts, othersPublished, s.cfg.MaxAttempts, now.UTC()}
}

// Unpark puts parked messages back in the queue with their attempts reset,
// for an operator who fixed what made them fail. It returns how many it
// unparked. The later messages of a parked message's aggregate went out
// while it was parked, so consumers see an unparked message after them, out
// of its aggregate's order.
func (s *Store) Unpark(ctx context.Context, ids ...int64) (int64, error) {
	var total int64
	for start := 0; start < len(ids); start += 500 {
		part := ids[start:min(start+500, len(ids))]
		args := make([]any, len(part))
		phs := make([]string, len(part))
		for i, id := range part {
			args[i] = id
			phs[i] = s.dialect.ph(i + 1)
		}
		res, err := s.db.ExecContext(ctx, `UPDATE `+s.table+` SET parked_at = NULL, attempts = 0, next_attempt_at = NULL
			WHERE parked_at IS NOT NULL AND id IN (`+strings.Join(phs, ", ")+`)`, args...)
		if err != nil {
			return total, fmt.Errorf("hooks: unpark: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("hooks: unpark: %w", err)
		}
		total += n
	}
	return total, nil
}

// splitPublished splits the claimed ids into the published ones and the
// rest, in claim order.
func splitPublished(msgs []runtime.OutboxMessage, published []int64) (done, failed []int64) {
	ok := make(map[int64]bool, len(published))
	for _, id := range published {
		ok[id] = true
	}
	for _, m := range msgs {
		if ok[m.ID] {
			done = append(done, m.ID)
		} else {
			failed = append(failed, m.ID)
		}
	}
	return done, failed
}

// failureHeads returns, of the failed ids, the first of each aggregate:
// the message that failed. The aggregate's later messages were not
// published because it failed; they wait behind it (the claim's order
// check) without an attempt of their own, so parking the failed message
// parks none of them. Heads that the publisher reported as failing
// permanently (see failedPublish) come back in park, the others in retry.
func failureHeads(msgs []runtime.OutboxMessage, failed []int64, perr error) (retry, park []int64) {
	if len(failed) == 0 {
		return nil, nil
	}
	isFailed := make(map[int64]bool, len(failed))
	for _, id := range failed {
		isFailed[id] = true
	}
	permanent := permanentIDs(perr)
	seen := make(map[aggKey]bool)
	for _, m := range msgs {
		a := aggKey{m.AggregateType, m.AggregateID}
		if isFailed[m.ID] && !seen[a] {
			seen[a] = true
			if permanent[m.ID] {
				park = append(park, m.ID)
			} else {
				retry = append(retry, m.ID)
			}
		}
	}
	return retry, park
}

// failedPublish is implemented by the publish errors of package
// runtime/relay (relay.PublishError): which messages failed, and whether
// retrying cannot help.
type failedPublish interface {
	error
	FailedIDs() []int64
	Permanent() bool
}

// permanentIDs collects the ids of every permanent failure in err's tree.
func permanentIDs(err error) map[int64]bool {
	out := map[int64]bool{}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
			return
		case failedPublish:
			if e.Permanent() {
				for _, id := range e.FailedIDs() {
					out[id] = true
				}
			}
			return
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// failureText is the last_error recorded on messages that were not published.
func failureText(perr error) string {
	if perr == nil {
		return "not published"
	}
	return perr.Error()
}

// decodeHeaders sets m.Headers from a headers column value.
func decodeHeaders(headers []byte, m *runtime.OutboxMessage) error {
	if len(headers) == 0 || string(headers) == "null" {
		return nil
	}
	if err := json.Unmarshal(headers, &m.Headers); err != nil {
		return fmt.Errorf("hooks: claim: row %d: headers: %w", m.ID, err)
	}
	return nil
}

// updateIDs runs "UPDATE table SET set WHERE id IN ids" in chunks.
func (s *Store) updateIDs(ctx context.Context, tx *sql.Tx, set string, setArgs []any, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	if s.dialect.name == "postgres" {
		_, err := tx.ExecContext(ctx, `UPDATE `+s.table+` SET `+set+` WHERE id = ANY(`+s.dialect.ph(len(setArgs)+1)+`)`, append(setArgs, ids)...)
		return err
	}
	const chunk = 500
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		args := append([]any(nil), setArgs...)
		for _, id := range part {
			args = append(args, id)
		}
		q := `UPDATE ` + s.table + ` SET ` + set + ` WHERE id IN (?` + strings.Repeat(", ?", len(part)-1) + `)`
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// DeletePublished deletes rows published before now minus olderThan, at most
// batch rows per statement (default 1,000 when batch <= 0), and returns how
// many it deleted. Run it periodically; keep olderThan longer than any
// in-memory aggregate lives after its save, because the outbox row is what
// deduplicates a second save of the same pending event (see the package
// documentation).
func (s *Store) DeletePublished(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	// The cutoff uses the clock that wrote published_at: the database's on
	// PostgreSQL, the process's on SQLite.
	var cutoff any = time.Now().Add(-olderThan).UTC()
	cutoffSQL := s.dialect.ph(1)
	if s.dialect.name == "postgres" {
		cutoff, cutoffSQL = olderThan.Microseconds(), `now() - $1 * interval '1 microsecond'`
	}
	// Published rows are mostly the oldest: walk the primary key from the
	// start rather than keep an index on published_at, which would cost
	// every mark an index insertion.
	q := `DELETE FROM ` + s.table + ` WHERE id IN (SELECT id FROM ` + s.table +
		` WHERE published_at IS NOT NULL AND published_at < ` + cutoffSQL + ` ORDER BY id LIMIT ` + s.dialect.ph(2) + `)`
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, q, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("hooks: delete published: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("hooks: delete published: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Listen waits for PostgreSQL notifications on the outbox table's channel
// (sent by the statement trigger that [Migrate] installs) and calls notify
// for each, after one initial call once it is listening. It holds one pool
// connection, which it discards when it returns. It returns ctx.Err() when
// ctx is done and the connection's error when the connection fails. On
// SQLite it returns an error wrapping errors.ErrUnsupported at once.
func (s *Store) Listen(ctx context.Context, notify func()) error {
	if s.dialect.name != "postgres" {
		return fmt.Errorf("hooks: listen: %w: LISTEN/NOTIFY needs PostgreSQL", errors.ErrUnsupported)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("hooks: listen: %w", err)
	}
	defer conn.Close()
	var lerr error
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			lerr = fmt.Errorf("hooks: listen: %w: the driver is %T, LISTEN needs pgx", errors.ErrUnsupported, dc)
			return nil
		}
		pc := c.Conn()
		if _, err := pc.Exec(ctx, `LISTEN "`+baseName(s.table)+`"`); err != nil {
			lerr = fmt.Errorf("hooks: listen: %w", err)
			return driver.ErrBadConn
		}
		notify()
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				if ctx.Err() != nil {
					lerr = ctx.Err()
				} else {
					lerr = fmt.Errorf("hooks: listen: %w", err)
				}
				// The connection is listening (or broken): never hand it back to the pool.
				return driver.ErrBadConn
			}
			notify()
		}
	})
	if lerr != nil {
		return lerr
	}
	if err != nil {
		return fmt.Errorf("hooks: listen: %w", err)
	}
	return nil
}

// Stats is the state of the outbox table, for monitoring: the three figures
// to watch are how many messages are pending, how long the oldest has been
// waiting, and how many failed or were parked.
type Stats struct {
	// Pending counts messages not yet published and not parked.
	Pending int64
	// Retrying counts pending messages that failed at least once.
	Retrying int64
	// Parked counts messages set aside after a permanent failure or too
	// many attempts (see [Store.Unpark]).
	Parked int64
	// OldestPending is the age of the oldest pending message (zero when
	// none), measured on the database's clock on PostgreSQL.
	OldestPending time.Duration
}

// Stats reads the outbox's [Stats] with one query over the pending and
// parked rows' partial indexes; published rows are not read. On a large
// backlog it counts every pending row: call it at scrape intervals, not per
// message.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	pending := `FROM ` + s.table + ` WHERE published_at IS NULL AND parked_at IS NULL`
	age := `COALESCE(EXTRACT(EPOCH FROM now() - (SELECT min(created_at) ` + pending + `)), 0)`
	if s.dialect.name == "sqlite" {
		age = `COALESCE((julianday('now') - julianday((SELECT min(created_at) ` + pending + `))) * 86400, 0)`
	}
	// Each figure reads a partial index: pending rows, parked rows.
	q := `SELECT (SELECT count(*) ` + pending + `),
		(SELECT count(*) ` + pending + ` AND attempts > 0),
		(SELECT count(*) FROM ` + s.table + ` WHERE parked_at IS NOT NULL AND published_at IS NULL),
		` + age
	var st Stats
	var seconds float64
	if err := s.db.QueryRowContext(ctx, q).Scan(&st.Pending, &st.Retrying, &st.Parked, &seconds); err != nil {
		return Stats{}, fmt.Errorf("hooks: stats: %w", err)
	}
	if seconds > 0 {
		st.OldestPending = time.Duration(seconds * float64(time.Second))
	}
	return st, nil
}
