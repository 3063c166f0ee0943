package dashboard_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// fakeStore is an in-memory dashboard.Store over a list of entries.
type fakeStore struct {
	mu      sync.Mutex
	entries []sqlstore.Entry
	queries []sqlstore.Query
	unpark  []int64
	discard []int64
	// gone are the rows Discard deleted: Entry no longer finds them (the
	// lists and counts, which the tests read for other things, still do).
	gone map[int64]bool
	// statsCalls and byTypeCalls count the expensive reads.
	statsCalls, byTypeCalls int
}

func newFake() *fakeStore { return &fakeStore{} }

// add appends an entry in state st with the given aggregate id and error.
func (f *fakeStore) add(st sqlstore.State, aggID, lastError string, payload string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := int64(len(f.entries) + 1)
	e := sqlstore.Entry{
		OutboxMessage: runtime.OutboxMessage{
			ID:    id,
			Topic: "order",
			Envelope: runtime.Envelope{
				EventID:       uuid.Must(uuid.NewV7()),
				EventType:     "OrderPlaced",
				EventVersion:  1,
				AggregateType: "order",
				AggregateID:   aggID,
				OccurredAt:    time.Now().Add(-time.Minute),
				Payload:       []byte(payload),
				Headers:       map[string]string{"correlation_id": "c-" + aggID},
			},
			CreatedAt: time.Now().Add(-time.Minute),
		},
		State:     st,
		LastError: lastError,
	}
	switch st {
	case sqlstore.StateParked:
		e.ParkedAt, e.Attempts = time.Now(), 3
	case sqlstore.StateRetrying:
		e.Attempts = 1
	case sqlstore.StatePublished:
		e.PublishedAt = time.Now()
	}
	f.entries = append(f.entries, e)
	return id
}

func (f *fakeStore) Stats(ctx context.Context) (relay.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statsCalls++
	var st relay.Stats
	for _, e := range f.entries {
		switch e.State {
		case sqlstore.StatePending, sqlstore.StateRetrying:
			st.Pending++
			if e.State == sqlstore.StateRetrying {
				st.Retrying++
			}
			st.OldestPending = max(st.OldestPending, time.Since(e.CreatedAt))
		case sqlstore.StateParked:
			st.Parked++
		}
	}
	return st, nil
}

func (f *fakeStore) StatsByType(ctx context.Context) ([]sqlstore.GroupStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.byTypeCalls++
	m := map[[2]string]*sqlstore.GroupStats{}
	for _, e := range f.entries {
		if e.State == sqlstore.StatePublished {
			continue
		}
		k := [2]string{e.Topic, e.EventType}
		g := m[k]
		if g == nil {
			g = &sqlstore.GroupStats{Topic: e.Topic, EventType: e.EventType}
			m[k] = g
		}
		if e.State == sqlstore.StateParked {
			g.Parked++
		} else {
			g.Pending++
		}
	}
	out := []sqlstore.GroupStats{}
	for _, g := range m {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic+out[i].EventType < out[j].Topic+out[j].EventType })
	return out, nil
}

func (f *fakeStore) Entries(ctx context.Context, q sqlstore.Query) ([]sqlstore.Entry, error) {
	if _, err := sqlstore.ParseState(string(q.State)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	limit := q.Limit
	if limit == 0 {
		limit = sqlstore.DefaultQueryLimit
	}
	out := []sqlstore.Entry{}
	for _, e := range f.entries {
		switch {
		case e.ID <= q.AfterID,
			q.State == sqlstore.StatePending && e.State != sqlstore.StatePending && e.State != sqlstore.StateRetrying,
			q.State != "" && q.State != sqlstore.StatePending && e.State != q.State,
			q.Topic != "" && e.Topic != q.Topic,
			q.EventType != "" && e.EventType != q.EventType,
			q.AggregateType != "" && e.AggregateType != q.AggregateType,
			q.AggregateID != "" && e.AggregateID != q.AggregateID,
			q.EventID != uuid.Nil && e.EventID != q.EventID:
			continue
		}
		out = append(out, e)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

func (f *fakeStore) Entry(ctx context.Context, id int64) (sqlstore.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id < 1 || id > int64(len(f.entries)) || f.gone[id] {
		return sqlstore.Entry{}, fmt.Errorf("entry %d: %w", id, sqlstore.ErrNotFound)
	}
	return f.entries[id-1], nil
}

func (f *fakeStore) setState(st sqlstore.State, ids []int64, record *[]int64) int64 {
	var n int64
	for _, id := range ids {
		*record = append(*record, id)
		if id >= 1 && id <= int64(len(f.entries)) && f.entries[id-1].State == sqlstore.StateParked {
			f.entries[id-1].State = st
			f.entries[id-1].ParkedAt = time.Time{}
			n++
		}
	}
	return n
}

func (f *fakeStore) Unpark(ctx context.Context, ids ...int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setState(sqlstore.StateRetrying, ids, &f.unpark), nil
}

func (f *fakeStore) Discard(ctx context.Context, ids ...int64) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[int64]bool{}
	}
	for _, id := range ids {
		if id >= 1 && id <= int64(len(f.entries)) && f.entries[id-1].State == sqlstore.StateParked {
			f.gone[id] = true
		}
	}
	return f.setState(sqlstore.StatePublished, ids, &f.discard), nil
}
