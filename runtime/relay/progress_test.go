package relay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestBatchResultMessages: OnBatch sees the claimed messages (those not in
// Failures were published), how long publishing took, and when it ended:
// after the messages were written and before the callback.
func TestBatchResultMessages(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "good"), newMessage(2, "bad"), newMessage(3, "good"))
	errUnknown := errors.New("unknown topic")
	pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
		if topic == "bad" {
			return errUnknown
		}
		return nil
	}}
	batches := newBatchRecorder()
	before := time.Now()
	r, err := relay.New(mem, pub, relay.Config{PollInterval: never, MinBackoff: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	res := batches.Raw()
	for len(res) == 0 {
		batches.untilCount(t, 1)
		res = batches.Raw()
	}
	b := res[0]
	var ids []int64
	for _, m := range b.Messages {
		ids = append(ids, m.ID)
		if m.CreatedAt.IsZero() || m.Topic == "" || m.EventType == "" {
			t.Errorf("message %d = %+v, want its CreatedAt, Topic and EventType", m.ID, m)
		}
	}
	if len(ids) != 3 || ids[0] != 1 || ids[1] != 2 || ids[2] != 3 {
		t.Errorf("Messages IDs = %v, want [1 2 3]", ids)
	}
	if len(b.Failures) != 1 || b.Failures[0].ID != 2 {
		t.Errorf("Failures = %+v, want message 2", b.Failures)
	}
	if b.PublishedAt.Before(before) || b.PublishDuration <= 0 || b.PublishDuration > b.Duration {
		t.Errorf("PublishedAt = %v (test started %v), PublishDuration = %v, Duration = %v: want a publish end after the start and a publish duration within the batch's",
			b.PublishedAt, before, b.PublishDuration, b.Duration)
	}
}

// TestLastProgress: zero before Run; set by a claim that found nothing;
// not advanced while every claim fails; advanced again once the store
// answers.
func TestLastProgress(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	var failing atomic.Bool
	claims := make(chan int, 100)
	errDown := errors.New("database down")
	store := &testStore{Store: mem, claims: claims, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
		if failing.Load() {
			return relay.Batch{}, errDown
		}
		return mem.Claim(ctx, req)
	}}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.LastProgress(); !got.IsZero() {
		t.Fatalf("LastProgress before Run = %v, want zero", got)
	}
	before := time.Now()
	start(t, context.Background(), r)
	if n := receive(t, claims); n != 0 {
		t.Fatalf("first claim = %d, want 0 (empty outbox)", n)
	}
	first := untilProgress(t, r, before)

	failing.Store(true)
	r.Notify()
	// Several failed claims in a row (the relay backs off 1ms between
	// them): no progress.
	for range 3 {
		for receive(t, claims) != -1 {
		}
	}
	if got := r.LastProgress(); !got.Equal(first) {
		t.Fatalf("LastProgress moved from %v to %v while every claim failed", first, got)
	}

	failing.Store(false)
	mem.Add(newMessage(1, "orders"))
	r.Notify()
	waitPending(t, mem)
	untilProgress(t, r, first.Add(time.Nanosecond))
}

// untilProgress waits until r.LastProgress() is at or after after, and
// returns it.
func untilProgress(t *testing.T, r *relay.Relay, after time.Time) time.Time {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if p := r.LastProgress(); !p.Before(after) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("LastProgress = %v, want at or after %v", r.LastProgress(), after)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitPending waits until mem has nothing pending.
func waitPending(t *testing.T, mem *runtimetest.MemoryStore) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for len(mem.Pending()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pending = %v, want none", mem.Pending())
		}
		time.Sleep(time.Millisecond)
	}
}
