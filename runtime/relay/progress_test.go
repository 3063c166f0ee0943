package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
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

// startBrokerDown starts a relay on mem, with batches of batchSize (0:
// the default), publishing to a broker that rejects "rejected" messages
// for good and fails every publish while down is set (it starts set). Each
// publish call's topic is sent on calls. No active polling: the relay
// claims only when notified or after a failure, so each progress is the
// round the test expects. first is the progress of the relay's first
// claim, on the empty outbox.
func startBrokerDown(t *testing.T, mem *runtimetest.MemoryStore, batchSize int) (r *relay.Relay, down *atomic.Bool, calls chan string, first time.Time) {
	t.Helper()
	down, calls = new(atomic.Bool), make(chan string, 100)
	down.Store(true)
	pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
		select {
		case calls <- topic:
		default:
		}
		switch {
		case topic == "rejected":
			return runtime.Permanent(errors.New("message too large"))
		case down.Load():
			return errors.New("broker unreachable")
		}
		return nil
	}}
	r, err := relay.New(mem, pub, relay.Config{
		BatchSize: batchSize, PollInterval: never, ActivePeriod: time.Nanosecond,
		MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	start(t, context.Background(), r)
	return r, down, calls, untilProgress(t, r, before)
}

// TestLastProgressBrokerDown: while the broker fails every publish, the
// relay makes no progress; once it recovers, it does; a batch whose
// messages the broker rejects for good is progress too (they are parked and
// the relay goes on).
func TestLastProgressBrokerDown(t *testing.T) {
	// Failed messages may be retried at once: every claim finds the
	// message again, and fails to publish it. (With a retry delay, the
	// claims in between find nothing to do, which is progress: the
	// backlog's age is what shows a lasting outage; see LastProgress.)
	mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond, MaxRetryDelay: time.Nanosecond}
	r, down, calls, first := startBrokerDown(t, mem, 0)

	mem.Add(newMessage(1, "orders"))
	r.Notify()
	for range 3 { // three failed publishes, backing off between them
		receive(t, calls)
	}
	if got := r.LastProgress(); !got.Equal(first) {
		t.Fatalf("LastProgress moved from %v to %v while the broker was down", first, got)
	}

	down.Store(false)
	waitPending(t, mem)
	published := untilProgress(t, r, first.Add(time.Nanosecond))

	// A batch whose only message is rejected for good: parked, and the
	// relay goes on.
	mem.Add(newMessage(2, "rejected"))
	r.Notify()
	deadline := time.Now().Add(waitTimeout)
	for st, _ := mem.Stats(context.Background()); st.Parked != 1; st, _ = mem.Stats(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want message 2 parked", st)
		}
		time.Sleep(time.Millisecond)
	}
	untilProgress(t, r, published.Add(time.Nanosecond))
}

// TestLastProgressBrokerDownFullBatches: full batches are marked in the
// background while the batch claimed ahead waits; a batch of which nothing
// was published, the broker being down, is no progress when its mark ends
// either.
func TestLastProgressBrokerDownFullBatches(t *testing.T) {
	// The batch claimed ahead is dropped after a failed one; this store
	// keeps its messages claimed until LeaseTTL.
	mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond, MaxRetryDelay: time.Nanosecond, LeaseTTL: 20 * time.Millisecond}
	r, down, calls, first := startBrokerDown(t, mem, 2)

	for i := range 4 { // four aggregates: the claim ahead holds none back
		mem.Add(newMessage(i+1, "orders"))
	}
	r.Notify()
	for range 4 { // failed publishes of full batches, each claimed with the next ahead
		receive(t, calls)
	}
	if got := r.LastProgress(); !got.Equal(first) {
		t.Fatalf("LastProgress moved from %v to %v while the broker was down", first, got)
	}
	down.Store(false)
	deadline := time.Now().Add(waitTimeout)
	for len(mem.Pending()) != 0 { // no polling: wake the relay until it has published all
		if time.Now().After(deadline) {
			t.Fatalf("pending = %v, want none", mem.Pending())
		}
		r.Notify()
		time.Sleep(time.Millisecond)
	}
	untilProgress(t, r, first.Add(time.Nanosecond))
}
