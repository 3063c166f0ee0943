package relay_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestLostBatchStopsItsPublish: a store that learns that the relay's right
// to publish a batch ended before the batch's deadline (sqlstore: the
// database session holding the relay's lock ended) closes Batch.Lost; the
// relay then ends the batch's publish at once, with a cause that says so,
// rather than at its deadline (an hour away here).
func TestLostBatchStopsItsPublish(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"))
	lost := make(chan struct{})
	var once sync.Once
	store := &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
		b, err := mem.Claim(ctx, req)
		b.Lost, b.Deadline = lost, time.Now().Add(time.Hour)
		return b, err
	}}
	publishing := make(chan struct{})
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		once.Do(func() { close(publishing) })
		ctx := msgs[0].Context()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Hour):
			return nil
		}
	}}
	rec := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{PublishTimeout: time.Hour, PollInterval: time.Millisecond, OnBatch: rec.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	receive(t, publishing)
	close(lost)
	res := rec.untilCount(t, 1)[0]
	if res.Published != 0 || len(res.Failures) != 1 || !strings.Contains(res.Failures[0].Err.Error(), "lease lost") {
		t.Fatalf("batch after Lost closed: published %d, failures %v; want the message failed with the lease lost", res.Published, res.Failures)
	}
}

// TestLossCutsAPublishShort: when the store reports a batch lost while
// part of it is published (one aggregate's event to one topic went out,
// its next event, to another topic, was under way), the published message
// is marked, the other is handed to Mark as Lost (the memory store then
// releases it as it was: no retry delay, here an hour, no attempt, the
// loss being neither its fault nor the broker's) and is published again by
// the next claim, and the round is logged at WARN as a lease that ended
// during a publish, not as a failure of the broker's.
func TestLossCutsAPublishShort(t *testing.T) {
	mem := &runtimetest.MemoryStore{RetryDelay: time.Hour}
	first, next := newMessage(1, "orders"), newMessage(2, "invoices")
	next.AggregateID = first.AggregateID // published after first, in a stage of its own
	mem.Add(first, next)
	lost := make(chan struct{})
	var claims atomic.Int32
	store := &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
		b, err := mem.Claim(ctx, req)
		if claims.Add(1) == 1 {
			b.Lost = lost // later batches are not lost
		}
		return b, err
	}}
	var cut sync.Once
	pub := &fakePublisher{fn: func(topic string, msgs []*message.Message) error {
		if topic != "invoices" {
			return nil
		}
		err := error(nil)
		cut.Do(func() {
			close(lost)
			ctx := msgs[0].Context()
			<-ctx.Done()
			err = context.Cause(ctx)
		})
		return err
	}}
	logs := &runtimetest.LogBuffer{}
	rec := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{PublishTimeout: time.Hour, PollInterval: time.Millisecond, OnBatch: rec.OnBatch,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	rec.untilCount(t, 2)
	outs := store.Outcomes()
	if want := []int64{1}; !slices.Equal(outs[0].Published, want) {
		t.Errorf("the cut batch's mark: published %v; want %v", outs[0].Published, want)
	}
	if f := outs[0].Failed; len(f) != 1 || f[0].ID != 2 || !f[0].Lost || !f[0].Transient || f[0].Permanent {
		t.Errorf("the cut batch's mark: failed %+v; want message 2 as Lost (and Transient, for stores that do not know Lost)", f)
	}
	if want := []int64{2}; !slices.Equal(outs[1].Published, want) {
		t.Errorf("the next batch's mark: published %v; want %v published again at once", outs[1].Published, want)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="relay: the lease ended during a publish;`) {
		t.Errorf("no WARN about the lease that ended during the publish:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "relay: publish failed") {
		t.Errorf("the loss was logged as a failure to publish:\n%s", logs.String())
	}
}

// lossStore reports one lease loss, as sqlstore.Store.LeaseLost does.
type lossStore struct {
	*shardStore
	mu       sync.Mutex
	reported bool
}

func (s *lossStore) LeaseLost(string) (string, time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported {
		return "", 0, false
	}
	s.reported = true
	return "lease expired before its renewal", 3 * time.Second, true
}

// TestLeaseLossIsLoggedAtWarn: a loss of shards the store reports (a lease
// that expired while the relay was paused, a session that ended) is logged
// once at WARN, with why and how late the renewal came; shards given back
// stay at INFO ("relay: shards held").
func TestLeaseLossIsLoggedAtWarn(t *testing.T) {
	claims := make(chan int, 1000)
	store := &lossStore{shardStore: &shardStore{testStore: &testStore{Store: &runtimetest.MemoryStore{}, claims: claims}}}
	h := &recordHandler{}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: time.Millisecond, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	for range 3 {
		receive(t, claims)
	}
	rec, ok := h.find("relay: lease lost")
	if !ok {
		t.Fatal(`no "relay: lease lost" record`)
	}
	if rec.Level != slog.LevelWarn || rec.Attrs["reason"] != "lease expired before its renewal" || rec.Attrs["late"] != "3s" || rec.Attrs["owner"] == "" {
		t.Errorf(`"relay: lease lost" = %+v; want WARN with reason, late=3s and owner`, rec)
	}
	h.mu.Lock()
	n := 0
	for _, r := range h.records {
		if r.Msg == "relay: lease lost" {
			n++
		}
	}
	h.mu.Unlock()
	if n != 1 {
		t.Errorf(`"relay: lease lost" logged %d times, want once`, n)
	}
}
