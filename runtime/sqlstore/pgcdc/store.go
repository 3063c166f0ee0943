package pgcdc

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// standbyRetry is how often a standby store tries to take the slot.
const standbyRetry = time.Second

// standbyClaim is how soon a standby's relay claims again (an in-memory
// look): once the store has taken the slot, its relay publishes within
// it, not a whole standbyRetry later.
const standbyClaim = 100 * time.Millisecond

// startingRetry is how soon the relay claims again while the store's
// stream is opening.
const startingRetry = 20 * time.Millisecond

// statusDelay is how soon after a mark that moved the confirmed position
// the stream sends it to the server.
const statusDelay = 50 * time.Millisecond

// txn is a committed transaction of the stream holding events.
type txn struct {
	// end is the transaction's end LSN: once its events and every earlier
	// transaction's are published, the server may forget up to it.
	end pglogrepl.LSN
	// left counts its events not yet published.
	left int
	// commit is its commit time, for the lag in seconds.
	commit time.Time
}

// entry is one event of the stream.
type entry struct {
	msg runtime.OutboxMessage
	tx  *txn // nil for an orphan: a claim of an earlier stream
	// claimed: in a batch the relay has not marked yet.
	claimed bool
	// done: published (or repeated one that was); left out of claims.
	done bool
	// waitFor is a claimed entry of an earlier stream that this one
	// repeats: it waits for that one's mark (see [Store.restart]).
	waitFor *entry
	// retryAt is when a failed entry may be claimed again; attempts
	// counts its failures that were its own.
	retryAt  time.Time
	attempts int
	// fromTable: a row of a diverted aggregate, read from the table
	// (see park.go), not from the stream.
	fromTable bool
	// held: set aside behind a parked event, waiting for its hold;
	// unseen counts the holds that did not find its row yet.
	held   bool
	unseen int
}

// aggregate identifies an aggregate, whose events keep their order.
type aggregate struct{ typ, id string }

func aggregateOf(m runtime.OutboxMessage) aggregate {
	return aggregate{m.AggregateType, m.AggregateID}
}

// Store is a [relay.Store] that streams the outbox from a PostgreSQL
// logical replication slot: give it to [relay.New] in place of
// sqlstore.Store. See the package documentation.
type Store struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	pending  []*entry         // the stream's events, in commit order
	txns     []*txn           // unconfirmed transactions, in commit order
	inflight map[int64]*entry // claimed entries by ID, orphans included
	// confirmed is the position up to which every event was published
	// (or the stream held none): the flush position sent to the server.
	confirmed pglogrepl.LSN
	// unpublished counts the current stream's events not yet published,
	// doneN those published but still in pending (compact drops them).
	unpublished, doneN int
	gen                int // streams opened
	// heard is when the server was last heard from on the stream (Unix
	// nanoseconds): a batch may be published only until Lease after it.
	heard     atomic.Int64
	standby   bool   // another process holds the slot
	lastPID   uint32 // the backend process of the last stream's connection
	streaming bool   // a stream is open
	fault     error  // the last stream's error that needs an operator
	lost      chan struct{}
	interrupt func() // cuts the stream's wait short, to send a status
	// endErr, when set, ends the stream (see endStream).
	endErr   error
	space    chan struct{}
	fresh    chan struct{} // new events arrived (for Listen)
	lastBeat time.Time

	// The marker's queue (see [Config.SkipMarking]).
	markMu   sync.Mutex
	toMark   []int64
	markDone chan struct{}
	// awaiting are the events published whose published_at the marker
	// has not written yet, by row id (under mu): the slot moves past
	// them only once it has, so that a crash in between leaves no
	// published row looking pending (it is published again instead).
	awaiting map[int64]*entry

	// db is the store's plain connections (marking, parking, holding,
	// the heartbeat).
	db *pgxpool.Pool
	// Parking (Table mode, see park.go), under mu.
	diverted map[aggregate]*diversion
	tableq   []*entry // rows of diverted aggregates to publish, in id order
	toHold   []*entry // events set aside, waiting for their holds
	// parkTable: there is a table to park in (always in Table mode; in
	// Messages mode, when Table exists at Open).
	parkTable bool
	parkDone  chan struct{}
	// queued: the table has a queue of pending rows
	// (sqlstore.QueueTable), which the marker empties as it marks.
	queued bool

	cancel context.CancelFunc
	done   chan struct{}
}

// Open checks cfg, sets up the slot and the publication ([Setup]), and
// starts streaming from the slot in the background; Close stops it. It
// returns an error wrapping [ErrInvalidConfig], [ErrWALLevel] or
// [ErrSlotInvalidated], or the server's error, without starting. Another
// process streaming from the slot is no error: the store stands by and
// takes the slot over when it is free.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := Setup(ctx, cfg); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: connection string: %w", err)
	}
	pc.MaxConns = 3
	if pc.ConnConfig.ConnectTimeout == 0 { // connect_timeout in ConnString
		pc.ConnConfig.ConnectTimeout = cfg.StatementTimeout
	}
	db, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgcdc: connect: %w", err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Store{
		db:        db,
		diverted:  map[aggregate]*diversion{},
		parkDone:  make(chan struct{}),
		cfg:       cfg,
		log:       cfg.Logger,
		inflight:  map[int64]*entry{},
		lost:      make(chan struct{}),
		space:     make(chan struct{}, 1),
		fresh:     make(chan struct{}, 1),
		cancel:    cancel,
		done:      make(chan struct{}),
		markDone:  make(chan struct{}),
		awaiting:  map[int64]*entry{},
		parkTable: cfg.Mode == Table,
	}
	close(s.lost) // no stream yet: nothing claimed from one
	if err := s.loadDiverted(ctx); err != nil {
		cancel()
		db.Close()
		return nil, err
	}
	go s.run(sctx)
	go s.mark(sctx)
	if s.parkTable {
		go s.pollParked(sctx)
	} else {
		close(s.parkDone)
	}
	return s, nil
}

// Close stops streaming and closes the replication connection; the
// server keeps the slot, at the position last confirmed. Unpublished
// events are streamed again by the next store on the slot.
func (s *Store) Close() error {
	s.cancel()
	<-s.done
	<-s.markDone
	<-s.parkDone
	s.db.Close()
	return nil
}

// Claim returns the stream's events that may be published now, in commit
// order: for each aggregate a prefix of its unpublished events, none
// waiting for a retry. It returns an empty batch with ClaimAgainIn while
// another process holds the slot, and the last stream's error while one
// that needs an operator ([ErrWALLevel], [ErrReplicationRole],
// [ErrSlotInvalidated], [ErrNoSlot]) keeps it from streaming.
func (s *Store) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault != nil && !s.streaming {
		return relay.Batch{}, s.fault
	}
	switch {
	case s.standby:
		return relay.Batch{ClaimAgainIn: standbyClaim}, nil
	case !s.streaming:
		// Nothing may be published while no stream is open (its events
		// are streamed again when one is): the stream is starting, or
		// opening again after an error.
		return relay.Batch{ClaimAgainIn: startingRetry}, nil
	}
	now := time.Now()
	// The lease counts from the last word of the server, not from the
	// claim: a process paused past Lease (a standby may have the slot by
	// now) hands out nothing from its buffer when it wakes, before its
	// stream has noticed that the server ended it.
	heard := time.Unix(0, s.heard.Load())
	if now.Sub(heard) >= s.cfg.Lease {
		return relay.Batch{ClaimAgainIn: startingRetry}, nil
	}
	blocked := map[aggregate]bool{}
	var b relay.Batch
	var bytes int64
	// The rows of released parked aggregates first (their later events
	// are held: they do not stream), then the stream.
scan:
	for _, list := range [2][]*entry{s.tableq, s.pending} {
		for _, e := range list {
			if e.done || e.held {
				continue
			}
			k := aggregateOf(e.msg)
			if blocked[k] || (!e.fromTable && s.diverted[k] != nil) {
				continue
			}
			if e.claimed || e.waitFor != nil || now.Before(e.retryAt) {
				blocked[k] = true
				continue
			}
			n := int64(len(e.msg.Payload))
			if len(b.Messages) >= req.Limit || (req.MaxBytes > 0 && len(b.Messages) > 0 && bytes+n > req.MaxBytes) {
				break scan
			}
			e.claimed = true
			s.inflight[e.msg.ID] = e
			bytes += n
			m := e.msg
			m.Attempts = e.attempts
			b.Messages = append(b.Messages, m)
		}
	}
	if len(b.Messages) > 0 {
		b.Deadline = heard.Add(s.cfg.Lease)
		b.Lost = s.lost
	}
	return b, nil
}

// Mark records the outcome of a batch: published events are done, and the
// position the server may forget up to moves past every transaction whose
// events are all done; failed ones wait for their retry, and their
// aggregates' later events with them.
func (s *Store) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var streamed, fromTable []int64
	for _, id := range o.Published {
		e := s.inflight[id]
		if e == nil {
			continue
		}
		delete(s.inflight, id)
		e.claimed = false
		if e.fromTable {
			s.publishedFromTable(e)
			fromTable = append(fromTable, id)
			continue
		}
		s.published(e)
		streamed = append(streamed, id)
	}
	s.queueMark(streamed, false)
	s.queueMark(fromTable, true)
	whole := len(o.Published) == 0
	// The permanent failures first: an aggregate they park holds its
	// later failed events too.
	failed := slices.Clone(o.Failed)
	slices.SortStableFunc(failed, func(a, b relay.Failure) int {
		switch {
		case a.Permanent == b.Permanent:
			return 0
		case a.Permanent:
			return -1
		}
		return 1
	})
	var parkErr error
	for _, f := range failed {
		e := s.inflight[f.ID]
		if e == nil {
			continue
		}
		delete(s.inflight, f.ID)
		e.claimed = false
		// One the lease's loss cut short (relay.Failure.Lost, never
		// Permanent) is claimed again as it was: no attempt, no delay.
		var delay time.Duration
		if !f.Lost {
			if !f.Transient && !whole {
				e.attempts++
			}
			delay = s.retryDelay(max(e.attempts, 1))
		}
		if f.Permanent {
			if s.parkTable {
				err := s.park(ctx, e, f.Err)
				if err == nil {
					continue
				}
				parkErr = err // tried again after the retry delay
			} else {
				// Messages mode without a table to park in: the event,
				// and its aggregate's later ones, wait as long as the
				// store waits for anything.
				delay = s.cfg.MaxRetryDelay
				s.log.Error("pgcdc: the broker refused an event for good; with no outbox table to park it in, it and its aggregate's later events are retried every MaxRetryDelay",
					slog.String("event_id", e.msg.EventID.String()),
					slog.String("aggregate_type", e.msg.AggregateType), slog.String("aggregate_id", e.msg.AggregateID),
					slog.Any("error", f.Err))
			}
		}
		if d := s.diverted[aggregateOf(e.msg)]; d != nil && !e.fromTable && e.tx != nil {
			s.setAside(e, d) // behind an event parked in this batch
			continue
		}
		e.retryAt = now.Add(delay)
		if e.tx == nil && !e.fromTable {
			s.released(e)
		}
	}
	s.compact()
	return parkErr
}

// published records e as published.
func (s *Store) published(e *entry) {
	if e.tx == nil { // an orphan: its repeat in the current stream is done too
		for _, c := range s.pending {
			if c.waitFor == e {
				c.waitFor = nil
				s.published(c)
			}
		}
		return
	}
	if !s.marking() {
		s.release(e)
		return
	}
	if s.finish(e) {
		s.awaiting[e.msg.ID] = e // settled once its row is marked
	}
}

// marking reports whether the marker writes published_at on the rows
// of the published events (Table mode, unless SkipMarking).
func (s *Store) marking() bool { return s.cfg.Mode == Table && !s.cfg.SkipMarking }

// marked settles the events of the rows ids, whose published_at the
// marker wrote (or gave up on).
func (s *Store) marked(ids []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if e := s.awaiting[id]; e != nil {
			delete(s.awaiting, id)
			s.settle(e)
		}
	}
}

// publishedFromTable records a row of a diverted aggregate as published.
func (s *Store) publishedFromTable(e *entry) {
	k := aggregateOf(e.msg)
	if d := s.diverted[k]; d != nil {
		delete(d.queued, e.msg.ID)
		d.sent[e.msg.ID] = true
	}
	kept := s.tableq[:0]
	for _, o := range s.tableq {
		if o != e {
			kept = append(kept, o)
		}
	}
	s.tableq = kept
}

// released hands the retry of a failed orphan to its repeat.
func (s *Store) released(e *entry) {
	for _, c := range s.pending {
		if c.waitFor == e {
			c.waitFor = nil
			c.retryAt, c.attempts = e.retryAt, e.attempts
		}
	}
}

// compact drops the done entries once they are a quarter of pending, and
// tells the stream when the buffer has room again.
func (s *Store) compact() {
	if s.doneN > 0 && s.doneN*4 >= len(s.pending) {
		kept := make([]*entry, 0, len(s.pending)-s.doneN)
		for _, e := range s.pending {
			if !e.done {
				kept = append(kept, e)
			}
		}
		s.pending, s.doneN = kept, 0
	}
	if s.unpublished < s.cfg.MaxBuffered {
		select {
		case s.space <- struct{}{}:
		default:
		}
	}
}

// retryDelay is the wait before the attempt-th retry: RetryDelay doubled
// per attempt, at most MaxRetryDelay, less up to a quarter at random.
func (s *Store) retryDelay(attempt int) time.Duration {
	d := s.cfg.RetryDelay << min(attempt-1, 30)
	if d <= 0 || d > s.cfg.MaxRetryDelay {
		d = s.cfg.MaxRetryDelay
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// Listen calls notify once, then whenever the stream delivers events,
// until ctx is done: the relay then claims at once instead of polling.
func (s *Store) Listen(ctx context.Context, notify func()) error {
	notify()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.fresh:
			notify()
		}
	}
}

// CanNotify reports true: the stream wakes the relay ([relay.NotifyChecker]).
func (s *Store) CanNotify() bool { return true }

// Stats reports the events decoded and not yet published (Pending), the
// ones with a failed attempt (Retrying), the age of the oldest unconfirmed
// transaction's commit (OldestPending), and in Parked the aggregates held
// behind a parked event (their rows in the table say how many events:
// sqlstore.Store's Stats on the same table counts them).
func (s *Store) Stats(ctx context.Context) (relay.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st relay.Stats
	for _, e := range s.pending {
		if !e.done {
			st.Pending++
			if e.attempts > 0 {
				st.Retrying++
			}
		}
	}
	// Pending is what a stream delivered; what it has not yet delivered
	// shows in the slot's lag (Status).
	if len(s.txns) > 0 {
		st.OldestPending = time.Since(s.txns[0].commit)
	}
	st.Parked = int64(len(s.diverted))
	return st, nil
}

// Confirmed returns the position up to which every event of the stream was
// published: what the store last told, or is about to tell, the server.
func (s *Store) Confirmed() pglogrepl.LSN {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// Standby reports whether another process holds the slot, so that this
// store waits to take it over.
func (s *Store) Standby() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.standby
}

// Err returns the last stream's error that needs an operator, nil when
// none (or the stream has recovered).
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fault
}

// SlotLag returns the WAL the server wrote since the slot's confirmed
// position (what the slot keeps from being recycled) and the age of the
// oldest event read from the stream and not yet published (0 when none):
// adapters/metrics' outbox_cdc_slot_lag_bytes and
// outbox_cdc_slot_lag_seconds.
func (s *Store) SlotLag(ctx context.Context) (bytes int64, age time.Duration, err error) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	defer cancel()
	err = s.db.QueryRow(qctx, `SELECT coalesce((pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, 0)
		FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("pgcdc: slot lag of %q: %w", s.cfg.Slot, err)
	}
	s.mu.Lock()
	if len(s.txns) > 0 {
		age = time.Since(s.txns[0].commit)
	}
	s.mu.Unlock()
	return bytes, age, nil
}

// endStream ends the current stream with err, under s.mu: the store
// could not write to the table what the slot's position waits for (a held
// or parked event of Messages mode). A server shutting down waits for its
// WAL senders' clients to confirm everything sent, so a stream kept open
// while the database refuses the store's writes would hold the shutdown
// up; once ended, the stream opens again after a backoff and streams the
// unconfirmed events again.
func (s *Store) endStream(err error) {
	if s.endErr == nil && s.streaming {
		s.endErr = err
		if s.interrupt != nil {
			s.interrupt()
		}
	}
}
