package runtimetest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

var _ relay.Store = (*MemoryStore)(nil)

// MemoryStore is an in-memory outbox that implements [relay.Store] the way the
// SQL stores do, for tests and examples:
//
//   - [MemoryStore.Claim] claims pending messages in ID order, exclusively:
//     concurrent claims never get the same message;
//   - it skips a message while an earlier message of the same aggregate
//     (same AggregateType and AggregateID) is claimed by another call, so
//     several relays keep each aggregate's order;
//   - it marks exactly the IDs publish returns, records a failed attempt
//     with publish's error on the others, and marks nothing when ctx is
//     cancelled (a rollback).
//
// It does not implement [relay.Notifier]; call [relay.Relay.Notify] after
// [MemoryStore.Add], as hooks do for SQLite.
//
// The zero value is an empty store ready to use. A MemoryStore is safe for
// concurrent use.
type MemoryStore struct {
	mu     sync.Mutex
	rows   []*memoryRow // in ID order
	lastID int64
}

type memoryRow struct {
	StoredMessage
	claimed bool
}

// StoredMessage is a message held by a [MemoryStore] with its delivery state.
type StoredMessage struct {
	runtime.OutboxMessage
	// PublishedAt is when the message was marked as published, or the zero
	// time while it is pending.
	PublishedAt time.Time
	// LastError is the error text of the last failed publish attempt, or "".
	LastError string
}

// Published reports whether the message has been marked as published.
func (m StoredMessage) Published() bool { return !m.PublishedAt.IsZero() }

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
		if m.CreatedAt.IsZero() {
			m.CreatedAt = time.Now()
		}
		m.Payload = bytes.Clone(m.Payload)
		m.Headers = maps.Clone(m.Headers)
		s.rows = append(s.rows, &memoryRow{StoredMessage: StoredMessage{OutboxMessage: m}})
		ids[i] = m.ID
	}
	return ids
}

// Claim implements [relay.Store]. It returns an error, and marks nothing,
// when limit is not positive or when publish returns an ID it was not given.
// When publish reports no error but leaves messages unpublished, Claim
// records a failed attempt on them and returns an error.
func (s *MemoryStore) Claim(ctx context.Context, limit int, publish relay.PublishFunc) (claimed int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, fmt.Errorf("runtimetest: claim limit %d is not positive", limit)
	}

	s.mu.Lock()
	batch := s.claimLocked(limit)
	s.mu.Unlock()
	if len(batch) == 0 {
		return 0, nil
	}
	defer func() { // release the claim, also when publish panics
		s.mu.Lock()
		for _, r := range batch {
			r.claimed = false
		}
		s.mu.Unlock()
	}()

	msgs := make([]runtime.OutboxMessage, len(batch))
	for i, r := range batch {
		msgs[i] = r.OutboxMessage
		msgs[i].Payload = bytes.Clone(r.Payload)
		msgs[i].Headers = maps.Clone(r.Headers)
	}
	ids, pubErr := publish(ctx, msgs)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return len(batch), err // rolled back
	}
	byID := make(map[int64]*memoryRow, len(batch))
	for _, r := range batch {
		byID[r.ID] = r
	}
	done := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if byID[id] == nil || done[id] {
			return len(batch), fmt.Errorf("runtimetest: publish returned id %d, which is not in the claimed batch or is repeated", id)
		}
		done[id] = true
	}
	now := time.Now()
	lastErr := "not published"
	if pubErr != nil {
		lastErr = pubErr.Error()
	}
	for _, r := range batch {
		if done[r.ID] {
			r.PublishedAt = now
			continue
		}
		r.Attempts++
		r.LastError = lastErr
	}
	switch {
	case pubErr != nil:
		return len(batch), fmt.Errorf("runtimetest: publish: %w", pubErr)
	case len(ids) < len(batch):
		return len(batch), fmt.Errorf("runtimetest: publish left %d of %d messages unpublished without an error", len(batch)-len(ids), len(batch))
	}
	return len(batch), nil
}

// claimLocked claims up to limit pending rows in ID order, skipping rows whose
// aggregate has an earlier row claimed by another call.
func (s *MemoryStore) claimLocked(limit int) []*memoryRow {
	var batch []*memoryRow
	busy := make(map[[2]string]bool) // aggregates with a row claimed elsewhere
	for _, r := range s.rows {
		if len(batch) == limit {
			break
		}
		if r.Published() {
			continue
		}
		// A row without an aggregate id has no order to keep.
		agg := [2]string{r.AggregateType, r.AggregateID}
		if r.claimed {
			if r.AggregateID != "" {
				busy[agg] = true
			}
			continue
		}
		if busy[agg] {
			continue
		}
		r.claimed = true
		batch = append(batch, r)
	}
	return batch
}

// Messages returns a copy of every message, published or not, in ID order.
func (s *MemoryStore) Messages() []StoredMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StoredMessage, len(s.rows))
	for i, r := range s.rows {
		out[i] = r.StoredMessage
		out[i].Payload = bytes.Clone(r.Payload)
		out[i].Headers = maps.Clone(r.Headers)
	}
	return out
}

// Pending returns the IDs of the messages not yet marked as published
// (claimed ones included), in ID order.
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
		if r.Published() == published {
			ids = append(ids, r.ID)
		}
	}
	return slices.Clip(ids)
}
