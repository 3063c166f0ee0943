package runtimetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

func TestMemoryStore(t *testing.T) {
	runtimetest.TestStore(t, func(*testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
		tm := runtimetest.StoreTimings
		s := &runtimetest.MemoryStore{RetryDelay: tm.RetryDelay, MaxRetryDelay: tm.MaxRetryDelay, MaxAttempts: tm.MaxAttempts, LeaseTTL: tm.LeaseTTL}
		return s, s.Add
	})
}

func TestMemoryStoreRejectsUnclaimedIDs(t *testing.T) {
	ctx := context.Background()
	s := &runtimetest.MemoryStore{}
	s.Add(runtime.OutboxMessage{Topic: "a"}, runtime.OutboxMessage{Topic: "a", Envelope: runtime.Envelope{AggregateID: "b"}})
	b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "x", Limit: 1})
	if err != nil || len(b.Messages) != 1 {
		t.Fatalf("Claim() = %v, %v; want one message", b.Messages, err)
	}
	if err := s.Mark(ctx, b, relay.Outcome{Published: []int64{1, 2}}); err == nil {
		t.Error("Mark() of id 2, which is not in the batch, = nil; want an error")
	}
	if diff := cmp.Diff([]int64{1, 2}, s.Pending()); diff != "" {
		t.Errorf("Pending() (-want +got):\n%s", diff)
	}
}

func TestMemoryStoreRecordsFailedAttempt(t *testing.T) {
	ctx := context.Background()
	s := &runtimetest.MemoryStore{}
	s.Add(runtime.OutboxMessage{Topic: "a", Envelope: runtime.Envelope{AggregateID: "1"}},
		runtime.OutboxMessage{Topic: "a", Envelope: runtime.Envelope{AggregateID: "2"}})
	b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "x", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Mark(ctx, b, relay.Outcome{Published: []int64{2}, Failed: []relay.Failure{{ID: 1, Err: errors.New("nope")}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{2}, s.Published()); diff != "" {
		t.Errorf("Published() (-want +got):\n%s", diff)
	}
	if m := s.Messages()[0]; m.Attempts != 1 || m.LastError != "nope" || m.State == sqlstore.StatePublished || m.NextAttemptAt.IsZero() {
		t.Errorf("message 1 = attempts %d, last error %q, published %v, next attempt %v; want a recorded failed attempt", m.Attempts, m.LastError, m.State == sqlstore.StatePublished, m.NextAttemptAt)
	}
}

// TestMemoryStoreMessagesAsEntries: Messages reports each row as
// sqlstore's operator view does: its state, and for a row held back, the
// parked row of its aggregate that holds it.
func TestMemoryStoreMessagesAsEntries(t *testing.T) {
	ctx := context.Background()
	s := &runtimetest.MemoryStore{}
	agg := func(id string) runtime.OutboxMessage {
		return runtime.OutboxMessage{Topic: "a", Envelope: runtime.Envelope{AggregateType: "order", AggregateID: id}}
	}
	s.Add(agg("1"), agg("2"), agg("1"))
	b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "x", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	// 1 parks (permanent), 2 is published, 3 waits behind 1.
	if err := s.Mark(ctx, b, relay.Outcome{Published: []int64{2}, Failed: []relay.Failure{{ID: 1, Err: errors.New("bad"), Permanent: true}}}); err != nil {
		t.Fatal(err)
	}
	type view struct {
		ID        int64
		State     sqlstore.State
		BlockedBy int64
	}
	var got []view
	for _, e := range s.Messages() {
		got = append(got, view{e.ID, e.State, e.BlockedBy})
	}
	want := []view{{1, sqlstore.StateParked, 0}, {2, sqlstore.StatePublished, 0}, {3, sqlstore.StatePending, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Messages() (-want +got):\n%s", diff)
	}
}
