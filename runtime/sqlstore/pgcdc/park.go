package pgcdc

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Parking. The slot cannot skip an event and come back to it, but a
// table can hold it: a message the broker refuses for good is parked in
// its row of the outbox table (parked_at, as the polling relay parks), and
// its aggregate is diverted to the table. The aggregate's later events are
// set aside as they stream (their rows held, next_attempt_at 'infinity',
// before the slot moves past them), so that the slot goes on and no later
// event overtakes the parked one. Once an operator retried or discarded
// the parked row (outbox parked retry|discard, sqlstore's Unpark or
// Discard), the store publishes the aggregate's pending rows from the
// table, in id order, then streams it again. The diverted aggregates are
// read from the table when the store opens, so a restart keeps them.
//
// In Table mode the rows are the writers'. In Messages mode an event has
// no row until it is parked or held: the store inserts it then, with its
// message's position in the log (its LSN, the event's id in the store) as
// the row's id, so that a repeat of the stream after a restart finds the
// row it wrote and writes nothing twice.

// parkPoll is how often the store looks at the diverted aggregates'
// rows for ones an operator released.
const parkPoll = time.Second

// heldError is the last_error of a row set aside behind a parked one.
const heldError = "held behind an earlier parked event of its aggregate (pgcdc)"

// diversion is an aggregate whose events go through the table.
type diversion struct {
	// asides counts the events set aside so far: the poller ends the
	// diversion only when none was set aside while it looked.
	asides int
	// queued holds the rows of the aggregate handed to the relay from
	// the table, by id; sent those it published, whose published_at the
	// marker may not have written yet.
	queued, sent map[int64]bool
}

func newDiversion() *diversion {
	return &diversion{queued: map[int64]bool{}, sent: map[int64]bool{}}
}

// loadDiverted reads the aggregates that have a parked or held row.
func (s *Store) loadDiverted(ctx context.Context) error {
	if s.cfg.Mode == Messages {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
		defer cancel()
		var exists bool
		if err := s.db.QueryRow(qctx, `SELECT to_regclass($1) IS NOT NULL`, s.cfg.Table).Scan(&exists); err != nil {
			return fmt.Errorf("pgcdc: look for the table %s: %w", s.cfg.Table, err)
		}
		s.parkTable = exists
		if !exists {
			s.log.Warn("pgcdc: no outbox table to park in: a message the broker refuses for good is retried every MaxRetryDelay, holding its aggregate back; create the table (sqlstore.Migrate, outbox migrate) to park it instead",
				slog.String("table", s.cfg.Table))
			return nil
		}
	}
	if s.cfg.Mode == Table {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
		defer cancel()
		if err := s.db.QueryRow(qctx, `SELECT to_regclass($1) IS NOT NULL`, sqlstore.QueueTable(s.cfg.Table)).Scan(&s.queued); err != nil {
			return fmt.Errorf("pgcdc: look for the queue of %s: %w", s.cfg.Table, err)
		}
	}
	return s.reloadDiverted(ctx)
}

// reloadDiverted adds to the diverted aggregates those the table holds
// parked or held rows of: at Open, and each time a stream opens, since
// another process may have parked an aggregate while this one stood by
// (its held rows are in the table, and the slot has moved past them).
//
// It runs while the new stream's server waits: like every statement of the
// store, it is bounded by StatementTimeout, since a connection the network
// froze would otherwise hold the slot (and the relay) idle for good.
func (s *Store) reloadDiverted(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	defer cancel()
	rows, err := s.db.Query(ctx, `SELECT DISTINCT aggregate_type, aggregate_id FROM `+s.cfg.Table+`
		WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at > 'epoch')`)
	if err != nil {
		return fmt.Errorf("pgcdc: read parked aggregates: %w", err)
	}
	aggs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (aggregate, error) {
		var a aggregate
		err := r.Scan(&a.typ, &a.id)
		return a, err
	})
	if err != nil {
		return fmt.Errorf("pgcdc: read parked aggregates: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range aggs {
		if s.diverted[a] == nil {
			s.diverted[a] = newDiversion()
		}
	}
	return nil
}

// park parks e's row and diverts its aggregate. It runs under s.mu (a
// rare path: the statement is short). On error nothing changed.
func (s *Store) park(ctx context.Context, e *entry, cause error) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	defer cancel()
	var n int64
	var err error
	if s.cfg.Mode == Messages && !e.fromTable {
		n, err = s.insertRows(pctx, []*entry{e}, "now()", "NULL", truncateError(cause))
	} else {
		var tag pgconn.CommandTag
		tag, err = s.db.Exec(pctx, `UPDATE `+s.cfg.Table+` SET parked_at = now(), attempts = attempts + 1, last_error = $2
			WHERE id = $1 AND published_at IS NULL`, e.msg.ID, truncateError(cause))
		n = tag.RowsAffected()
	}
	if err != nil {
		err = fmt.Errorf("pgcdc: park event %s (row %d): %w", e.msg.EventID, e.msg.ID, err)
		if s.cfg.Mode == Messages {
			s.endStream(err) // its row is not written: see endStream
		}
		return err
	}
	if n == 0 {
		// Not visible yet (see seenPatience), or deleted: tried again.
		return fmt.Errorf("pgcdc: park event %s: row %d is not in the table, or not yet visible", e.msg.EventID, e.msg.ID)
	}
	k := aggregateOf(e.msg)
	d := s.diverted[k]
	if d == nil {
		d = newDiversion()
		s.diverted[k] = d
	}
	s.log.Error("pgcdc: the broker refused an event for good; it is parked, and its aggregate's later events wait behind it until an operator retries or discards it (outbox parked)",
		slog.Int64("outbox_id", e.msg.ID), slog.String("event_id", e.msg.EventID.String()),
		slog.String("aggregate_type", e.msg.AggregateType), slog.String("aggregate_id", e.msg.AggregateID),
		slog.Any("error", cause))
	if e.fromTable {
		s.dropQueued(k)
		return nil
	}
	// The parked row is in the table: the stream is done with it.
	s.release(e)
	// The aggregate's later events in the buffer are set aside.
	for _, o := range s.pending {
		if !o.done && !o.claimed && !o.held && aggregateOf(o.msg) == k {
			s.setAside(o, d)
		}
	}
	return nil
}

// setAside holds e, an event of diverted aggregate d, in the table: the
// marker writes its hold, then releases it from the stream.
func (s *Store) setAside(e *entry, d *diversion) {
	e.held = true
	d.asides++
	s.toHold = append(s.toHold, e)
}

// release ends e's part in the stream, published or held in its row: the
// slot may move past it once every earlier event's part has ended too.
func (s *Store) release(e *entry) {
	if s.finish(e) {
		s.settle(e)
	}
}

// finish takes e out of the claims and the buffer's count; it reports
// whether e was a current stream's event not finished before.
func (s *Store) finish(e *entry) bool {
	if e.done || e.tx == nil {
		return false
	}
	e.done = true
	s.unpublished--
	s.doneN++
	return true
}

// settle ends e's part in its transaction, and moves the confirmed
// position past the transactions whose every event's part has ended.
func (s *Store) settle(e *entry) {
	if e.tx == nil {
		return // of an earlier stream, whose transactions are gone
	}
	e.tx.left--
	old := s.confirmed
	for len(s.txns) > 0 && s.txns[0].left == 0 {
		s.confirmed = max(s.confirmed, s.txns[0].end)
		s.txns = s.txns[1:]
	}
	if s.confirmed > old && s.interrupt != nil {
		s.interrupt()
	}
}

// hold writes the holds of the events set aside, then releases them from
// the stream. It runs in the marker's goroutine.
func (s *Store) hold(ctx context.Context) error {
	s.mu.Lock()
	es := s.toHold
	s.toHold = nil
	s.mu.Unlock()
	if len(es) == 0 {
		return nil
	}
	var missing []int64
	var err error
	if s.cfg.Mode == Messages {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StatementTimeout)
		_, err = s.insertRows(hctx, es, "NULL", "'infinity'", heldError)
		cancel()
	} else {
		ids := make([]int64, len(es))
		for i, e := range es {
			ids[i] = e.msg.ID
		}
		missing, err = s.updateSeen(ctx, `next_attempt_at = 'infinity', last_error = $2`, `published_at IS NULL AND parked_at IS NULL`, ids, heldError)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("pgcdc: hold %d events behind parked ones: %w", len(es), err)
		if s.cfg.Mode == Table {
			// Their rows are in the table, published from it in order
			// once the aggregate is released, held or not: the slot
			// need not wait for the holds.
			for _, e := range es {
				s.release(e)
			}
			return err
		}
		// Their rows are not written: tried again on the next pass, and
		// the slot must wait; the stream ends meanwhile (see endStream).
		s.toHold = append(es, s.toHold...)
		s.endStream(err)
		return err
	}
	var later []*entry
	for _, e := range es {
		if slices.Contains(missing, e.msg.ID) {
			// Not visible yet (see seenPatience): its hold is written on
			// a later pass, before the slot moves past it. A row gone
			// for good is let go: the aggregate's rows are read from the
			// table once it is released anyway.
			if e.unseen++; e.unseen < seenPatience {
				later = append(later, e)
				continue
			}
			s.log.Warn("pgcdc: an event to hold behind a parked one is not in the table (deleted?)", slog.Int64("outbox_id", e.msg.ID))
		}
		s.release(e)
	}
	s.toHold = append(later, s.toHold...)
	return nil
}

// dropQueued forgets the rows of k handed out from the table but not
// claimed: the aggregate is parked again.
func (s *Store) dropQueued(k aggregate) {
	kept := s.tableq[:0]
	for _, e := range s.tableq {
		if aggregateOf(e.msg) == k && !e.claimed {
			if d := s.diverted[k]; d != nil {
				delete(d.queued, e.msg.ID)
			}
			continue
		}
		kept = append(kept, e)
	}
	s.tableq = kept
}

// pollParked looks, every parkPoll, at the diverted aggregates' rows: one
// whose first pending row is no longer parked is published from the
// table, in id order, and one with no pending row left streams again.
func (s *Store) pollParked(ctx context.Context) {
	defer close(s.parkDone)
	t := time.NewTicker(parkPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		type look struct {
			k      aggregate
			asides int
		}
		var looks []look
		for k, d := range s.diverted {
			looks = append(looks, look{k, d.asides})
		}
		s.mu.Unlock()
		for _, l := range looks {
			if err := s.pollAggregate(ctx, l.k, l.asides); err != nil && ctx.Err() == nil {
				s.log.Warn("pgcdc: reading a parked aggregate's rows failed", slog.String("aggregate_type", l.k.typ), slog.String("aggregate_id", l.k.id), slog.Any("error", err))
			}
		}
	}
}

// pollAggregate looks at diverted aggregate k's pending rows; asides is
// its count of set-aside events before the query.
func (s *Store) pollAggregate(ctx context.Context, k aggregate, asides int) error {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	defer cancel()
	// With a queue, a row the polling relay published has no
	// published_at: pending rows are parked or queued.
	pending := "published_at IS NULL"
	if s.queued {
		pending += " AND (parked_at IS NOT NULL OR id IN (SELECT qid FROM " + sqlstore.QueueTable(s.cfg.Table) + "))"
	}
	rows, err := s.db.Query(qctx, `SELECT id, event_id::text, event_type, event_version, aggregate_type, aggregate_id, topic, payload,
		coalesce(headers, ''), occurred_at, created_at, attempts, parked_at IS NOT NULL
		FROM `+s.cfg.Table+` WHERE aggregate_type = $1 AND aggregate_id = $2 AND `+pending+` ORDER BY id LIMIT 1000`, k.typ, k.id)
	if err != nil {
		return err
	}
	type pendingRow struct {
		r      sqlstore.RowValues
		parked bool
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (pendingRow, error) {
		var p pendingRow
		err := row.Scan(&p.r.ID, &p.r.EventID, &p.r.EventType, &p.r.EventVersion, &p.r.AggregateType, &p.r.AggregateID, &p.r.Topic,
			&p.r.Payload, &p.r.Headers, &p.r.OccurredAt, &p.r.CreatedAt, &p.r.Attempts, &p.parked)
		return p, err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.diverted[k]
	if d == nil {
		return nil
	}
	left := got[:0]
	for _, p := range got {
		if !d.sent[p.r.ID] {
			left = append(left, p)
		}
	}
	got = left
	if len(got) == 0 {
		// Nothing left in the table: stream it again, unless an event
		// was set aside while the query ran (its row, committed after
		// the query began, would be left behind), or rows from the table
		// are still in flight.
		if d.asides == asides && len(d.queued) == 0 && !s.holding(k) {
			delete(s.diverted, k)
			s.log.Info("pgcdc: a parked aggregate's events are all published; it streams again",
				slog.String("aggregate_type", k.typ), slog.String("aggregate_id", k.id))
		}
		return nil
	}
	if got[0].parked {
		return nil // still parked
	}
	added := false
	for _, p := range got {
		if p.parked {
			break // a later row parked on its own: it waits its turn
		}
		if d.queued[p.r.ID] {
			continue
		}
		m, err := sqlstore.DecodeRow(p.r)
		if err != nil {
			return err
		}
		d.queued[p.r.ID] = true
		s.tableq = append(s.tableq, &entry{msg: m, fromTable: true, attempts: p.r.Attempts})
		added = true
	}
	if added {
		select {
		case s.fresh <- struct{}{}:
		default:
		}
	}
	return nil
}

// holding reports whether an event of k waits for its hold.
func (s *Store) holding(k aggregate) bool {
	for _, e := range s.toHold {
		if aggregateOf(e.msg) == k {
			return true
		}
	}
	return false
}

// truncateError is err's text, cut to a size a row's last_error keeps.
func truncateError(err error) string {
	msg := err.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	return msg
}

// insertRows writes the rows of events of Messages mode, which have none,
// in one transaction: parked (parkedAt "now()") or held (nextAttemptAt
// "'infinity'"), with lastError. A row that exists already (written
// before a restart: same id) is kept. It returns the rows of es that the
// table holds now.
func (s *Store) insertRows(ctx context.Context, es []*entry, parkedAt, nextAttemptAt, lastError string) (int64, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
	var n int64
	for _, e := range es {
		m := e.msg
		headers, err := sqlstore.EncodeHeaders(m.Headers)
		if err != nil {
			return 0, fmt.Errorf("event %s: %w", m.EventID, err)
		}
		var hv any
		if headers != "" {
			hv = headers
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s.cfg.Table+` (id, event_id, event_type, event_version, aggregate_type, aggregate_id, shard,
			topic, payload, headers, occurred_at, created_at, attempts, parked_at, next_attempt_at, last_error)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, `+parkedAt+`, `+nextAttemptAt+`, $14)
			ON CONFLICT DO NOTHING`,
			m.ID, m.EventID, m.EventType, m.EventVersion, m.AggregateType, m.AggregateID, sqlstore.ShardOf(m.AggregateType, m.AggregateID),
			m.Topic, string(m.Payload), hv, m.OccurredAt, m.CreatedAt, e.attempts, lastError)
		if err != nil {
			return 0, fmt.Errorf("event %s: %w", m.EventID, err)
		}
		var same bool
		if err := tx.QueryRow(ctx, `SELECT event_id = $2 FROM `+s.cfg.Table+` WHERE id = $1`, m.ID, m.EventID).Scan(&same); err != nil {
			return 0, fmt.Errorf("event %s: read its row back: %w", m.EventID, err)
		}
		if !same {
			return 0, fmt.Errorf("event %s: row %d of %s holds another event: the table's own rows reach the ids Messages mode parks at (log positions); park in a table of its own (Config.Table)", m.EventID, m.ID, s.cfg.Table)
		}
		n++
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return n, nil
}
