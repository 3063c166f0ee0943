package runtimetest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gooutbox/outbox/internal/backoff"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

var (
	_ relay.Store    = (*MemoryStore)(nil)
	_ relay.Releaser = (*MemoryStore)(nil)
	_ Parker         = (*MemoryStore)(nil)
	_ Discarder      = (*MemoryStore)(nil)
	_ StatsReader    = (*MemoryStore)(nil)
	_ Retainer       = (*MemoryStore)(nil)
)

// MemoryStore is an in-memory outbox that implements [relay.Store] with the
// same policy as the SQL store (sqlstore.Store), for tests and examples:
//
//   - [MemoryStore.Claim] returns pending messages in ID order, for each
//     aggregate a prefix of what it has pending: an aggregate that has a
//     message claimed by another owner, waiting for its retry, or parked
//     is left out whole;
//   - a claim is held until it is marked or until LeaseTTL passes; after
//     that another owner may claim the same messages, and the first
//     owner's [MemoryStore.Mark] is ignored (it is fenced);
//   - [MemoryStore.Mark] marks the published messages and records a failed
//     attempt on each aggregate's first failed message: a permanent
//     failure parks it; a failure while other messages of the batch were
//     published delays its retry (RetryDelay doubling per attempt up to
//     MaxRetryDelay) and parks it after MaxAttempts; a batch in which
//     nothing was published (the broker is down for everyone), or a
//     [relay.Failure] marked Transient (the broker's failure, not the
//     message's), delays the retry by RetryDelay without counting an
//     attempt.
//
// For operators, like sqlstore.Store, it has [MemoryStore.Unpark],
// [MemoryStore.Discard], [MemoryStore.Stats] and
// [MemoryStore.DeletePublished].
//
// It does not implement [relay.Notifier]; call [relay.Relay.Notify] after
// [MemoryStore.Add].
//
// The zero value is an empty store ready to use. A MemoryStore is safe for
// concurrent use.
type MemoryStore struct {
	// RetryDelay is the first retry delay of a failed message. Default: 1s.
	RetryDelay time.Duration
	// MaxRetryDelay caps the doubling retry delay. Default: 30s.
	MaxRetryDelay time.Duration
	// MaxAttempts parks a message after that many failed attempts counted
	// while other messages were published, transient failures not
	// counted. Default: 0, never.
	MaxAttempts int
	// LeaseTTL is how long a claim stays exclusive. Default: 15s.
	LeaseTTL time.Duration

	mu      sync.Mutex
	rows    []*memoryRow // in ID order
	lastID  int64
	claimNo int64
}

type memoryRow struct {
	rowState
	claim      int64 // the claim holding the row, 0 when none
	claimOwner string
	claimUntil time.Time
	deleted    bool // by DeletePublished or Discard: gone for good
}

// rowState is a message held by a [MemoryStore] with its delivery state.
type rowState struct {
	runtime.OutboxMessage
	// PublishedAt is when the message was marked as published, or the zero
	// time while it is pending.
	PublishedAt time.Time
	// LastError is the error text of the last failed publish attempt, or "".
	LastError string
	// NextAttemptAt is when a failed message may be claimed again.
	NextAttemptAt time.Time
	// ParkedAt is when the message was parked, or the zero time.
	ParkedAt time.Time
}

// Published reports whether the message has been marked as published.
func (m rowState) Published() bool { return !m.PublishedAt.IsZero() }

// memoryClaim is the Token of a MemoryStore batch.
type memoryClaim struct {
	no    int64
	owner string
}

// Add appends msgs to the outbox as pending messages and returns the IDs it
// gave them, increasing from 1. It ignores the messages' ID and sets a zero
// CreatedAt to the current time. Add copies the payload and headers.
func (s *MemoryStore) Add(msgs ...runtime.OutboxMessage) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		s.lastID++
		m.ID = s.lastID
		m.Attempts = 0
		if m.CreatedAt.IsZero() {
			m.CreatedAt = time.Now()
		}
		m.Payload = bytes.Clone(m.Payload)
		m.Headers = maps.Clone(m.Headers)
		s.rows = append(s.rows, &memoryRow{rowState: rowState{OutboxMessage: m}})
		ids[i] = m.ID
	}
	return ids
}

func (s *MemoryStore) leaseTTL() time.Duration {
	if s.LeaseTTL > 0 {
		return s.LeaseTTL
	}
	return 15 * time.Second
}

// Claim implements [relay.Store].
func (s *MemoryStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	if err := ctx.Err(); err != nil {
		return relay.Batch{}, err
	}
	if req.Limit <= 0 {
		return relay.Batch{}, fmt.Errorf("runtimetest: claim limit %d is not positive", req.Limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.claimNo++
	tok := memoryClaim{no: s.claimNo, owner: req.Owner}
	until := now.Add(s.leaseTTL())
	var (
		msgs  []runtime.OutboxMessage
		bytes int64
	)
	held := map[[2]string]bool{} // aggregates left out of this claim
	for _, r := range s.rows {
		if len(msgs) == req.Limit {
			break
		}
		if r.Published() || r.deleted {
			continue
		}
		agg := [2]string{r.AggregateType, r.AggregateID}
		if held[agg] {
			continue
		}
		if !r.ParkedAt.IsZero() || r.NextAttemptAt.After(now) || r.claim != 0 && r.claimUntil.After(now) {
			held[agg] = true
			continue
		}
		if req.MaxBytes > 0 && len(msgs) > 0 && bytes+int64(len(r.Payload)) > req.MaxBytes {
			break
		}
		bytes += int64(len(r.Payload))
		r.claim, r.claimOwner, r.claimUntil = tok.no, req.Owner, until
		m := r.OutboxMessage
		m.Payload = slices.Clone(r.Payload)
		m.Headers = maps.Clone(r.Headers)
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return relay.Batch{}, nil
	}
	return relay.Batch{Messages: msgs, Deadline: until, Token: tok}, nil
}

// ExcludesInFlight implements [relay.InFlightExcluder]: a claim leaves out
// every message another claim holds, and their aggregates with them.
func (s *MemoryStore) ExcludesInFlight() {}

// Mark implements [relay.Store]. It ignores messages whose claim is no longer
// the batch's (the lease passed), and returns an error for an ID that is not
// in the batch.
func (s *MemoryStore) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tok, ok := b.Token.(memoryClaim)
	if !ok {
		return fmt.Errorf("runtimetest: mark: batch token %T is not this store's", b.Token)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	byID := make(map[int64]*memoryRow, len(b.Messages))
	for _, m := range b.Messages {
		byID[m.ID] = s.rows[m.ID-1]
	}
	held := func(id int64) (*memoryRow, error) {
		r := byID[id]
		if r == nil {
			return nil, fmt.Errorf("runtimetest: mark: id %d is not in the batch", id)
		}
		if r.claim != tok.no {
			return nil, nil // fenced: another claim holds it now
		}
		return r, nil
	}
	for _, id := range o.Published {
		if byID[id] == nil {
			return fmt.Errorf("runtimetest: mark: id %d is not in the batch", id)
		}
	}
	for _, f := range o.Failed {
		if byID[f.ID] == nil {
			return fmt.Errorf("runtimetest: mark: id %d is not in the batch", f.ID)
		}
	}
	for _, id := range o.Published {
		r, err := held(id)
		if err != nil {
			return err
		}
		if r != nil {
			r.PublishedAt = now
		}
	}
	seen := map[[2]string]bool{}
	for _, f := range o.Failed {
		r, err := held(f.ID)
		if err != nil {
			return err
		}
		if r == nil || f.Lost {
			continue // a lost one is released below as it was
		}
		agg := [2]string{r.AggregateType, r.AggregateID}
		if seen[agg] {
			continue
		}
		seen[agg] = true
		r.LastError = f.Err.Error()
		switch {
		case f.Permanent:
			r.Attempts++
			r.ParkedAt = now
		case f.Transient:
			r.NextAttemptAt = now.Add(s.retryDelay(1)) // the broker's failure: no attempt
		case len(o.Published) > 0:
			r.Attempts++
			r.NextAttemptAt = now.Add(s.retryDelay(r.Attempts))
			if s.MaxAttempts > 0 && r.Attempts >= s.MaxAttempts {
				r.ParkedAt = now
			}
		default:
			r.NextAttemptAt = now.Add(s.retryDelay(1))
		}
	}
	for _, m := range b.Messages {
		if r := byID[m.ID]; r.claim == tok.no {
			r.claim, r.claimOwner = 0, ""
		}
	}
	return nil
}

// retryDelay is the delay after the attempts-th failed attempt.
func (s *MemoryStore) retryDelay(attempts int) time.Duration {
	d, maxD := s.RetryDelay, s.MaxRetryDelay
	if d <= 0 {
		d = time.Second
	}
	if maxD <= 0 {
		maxD = 30 * time.Second
	}
	return backoff.Exponential(d, maxD, attempts)
}

// Release implements [relay.Releaser]: it drops every claim owner holds.
func (s *MemoryStore) Release(ctx context.Context, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		if r.claim != 0 && r.claimOwner == owner {
			r.claim, r.claimOwner = 0, ""
		}
	}
	return nil
}

// Unpark puts parked messages back in the queue with their attempts reset,
// and returns how many it unparked.
func (s *MemoryStore) Unpark(ctx context.Context, ids ...int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, id := range ids {
		if id < 1 || id > int64(len(s.rows)) {
			continue
		}
		if r := s.rows[id-1]; !r.ParkedAt.IsZero() && !r.Published() && !r.deleted {
			r.ParkedAt, r.NextAttemptAt, r.Attempts = time.Time{}, time.Time{}, 0
			n++
		}
	}
	return n, nil
}

// Discard deletes parked messages that will never be published, so their
// aggregates' later messages go out, and returns how many it deleted. It
// leaves messages that are not parked alone.
func (s *MemoryStore) Discard(ctx context.Context, ids ...int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, id := range ids {
		if id < 1 || id > int64(len(s.rows)) {
			continue
		}
		if r := s.rows[id-1]; !r.ParkedAt.IsZero() && !r.Published() && !r.deleted {
			r.deleted = true
			n++
		}
	}
	return n, nil
}

// DeletePublished deletes the messages published before now minus
// olderThan, and returns how many it deleted; pending and parked messages
// stay. It takes batch for compatibility with the SQL store and ignores it.
func (s *MemoryStore) DeletePublished(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := time.Now().Add(-olderThan)
	var n int64
	for _, r := range s.rows {
		if r.Published() && !r.deleted && r.PublishedAt.Before(cutoff) {
			r.deleted = true
			n++
		}
	}
	return n, nil
}

// Stats reports the store's [relay.Stats].
func (s *MemoryStore) Stats(ctx context.Context) (relay.Stats, error) {
	if err := ctx.Err(); err != nil {
		return relay.Stats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		st     relay.Stats
		oldest time.Time
	)
	for _, r := range s.rows {
		switch {
		case r.Published() || r.deleted:
		case !r.ParkedAt.IsZero():
			st.Parked++
		default:
			st.Pending++
			if r.Attempts > 0 {
				st.Retrying++
			}
			if oldest.IsZero() || r.CreatedAt.Before(oldest) {
				oldest = r.CreatedAt
			}
		}
	}
	if !oldest.IsZero() {
		st.OldestPending = time.Since(oldest)
	}
	return st, nil
}

// Messages returns every message, published or not, in ID order, as
// sqlstore's operator view of a row has it ([sqlstore.Entry]: state, last
// error, times, and the parked row that holds a pending one back);
// deleted messages ([MemoryStore.DeletePublished], [MemoryStore.Discard])
// are left out. The payloads and headers are copies.
func (s *MemoryStore) Messages() []sqlstore.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]sqlstore.Entry, 0, len(s.rows))
	parked := map[[2]string]int64{} // aggregate → earliest parked row so far
	for _, r := range s.rows {
		if r.deleted {
			continue
		}
		e := sqlstore.Entry{
			OutboxMessage: r.OutboxMessage, LastError: r.LastError,
			NextAttemptAt: r.NextAttemptAt, PublishedAt: r.PublishedAt, ParkedAt: r.ParkedAt,
		}
		e.Payload = bytes.Clone(r.Payload)
		e.Headers = maps.Clone(r.Headers)
		agg := [2]string{r.AggregateType, r.AggregateID}
		switch {
		case r.Published():
			e.State = sqlstore.StatePublished
		case !r.ParkedAt.IsZero():
			e.State = sqlstore.StateParked
			if _, ok := parked[agg]; !ok {
				parked[agg] = r.ID
			}
		case r.Attempts > 0:
			e.State = sqlstore.StateRetrying
		default:
			e.State = sqlstore.StatePending
		}
		if e.State == sqlstore.StatePending || e.State == sqlstore.StateRetrying {
			e.BlockedBy = parked[agg]
		}
		out = append(out, e)
	}
	return out
}

// Pending returns the IDs of the messages not yet marked as published
// (claimed and parked ones included), in ID order.
func (s *MemoryStore) Pending() []int64 {
	return s.ids(false)
}

// Published returns the IDs of the messages marked as published, in ID order.
func (s *MemoryStore) Published() []int64 {
	return s.ids(true)
}

func (s *MemoryStore) ids(published bool) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int64
	for _, r := range s.rows {
		if r.Published() == published && !r.deleted {
			ids = append(ids, r.ID)
		}
	}
	return slices.Clip(ids)
}
