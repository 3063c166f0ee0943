package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	pkgerrors "github.com/pkg/errors"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

type ctxKey struct{}

// outcomeOpts compare Outcomes: errors by text, nil and empty slices alike.
var outcomeOpts = cmp.Options{errorText, cmpopts.EquateEmpty()}

func TestRunPublishesEachMessageOnceInOrder(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	var all []runtime.OutboxMessage
	for n := 1; n <= 25; n++ {
		topic := "a"
		if n%2 == 0 {
			topic = "b"
		}
		all = append(all, newMessage(n, topic))
	}
	mem.Add(all...)
	store := &testStore{Store: mem}
	pub := &fakePublisher{}
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: 10, PollInterval: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.WithValue(context.Background(), ctxKey{}, "value"), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })

	// Full batches are claimed back to back; each batch makes one
	// Publish call per topic, in ID order. The topics of a batch are
	// published concurrently, so order is defined within each topic.
	want := map[string][]publishCall{
		"a": {
			{Topic: "a", UUIDs: uuids(1, 3, 5, 7, 9)},
			{Topic: "a", UUIDs: uuids(11, 13, 15, 17, 19)},
			{Topic: "a", UUIDs: uuids(21, 23, 25)},
		},
		"b": {
			{Topic: "b", UUIDs: uuids(2, 4, 6, 8, 10)},
			{Topic: "b", UUIDs: uuids(12, 14, 16, 18, 20)},
			{Topic: "b", UUIDs: uuids(22, 24)},
		},
	}
	if diff := cmp.Diff(want, callsByTopic(pub.Calls())); diff != "" {
		t.Errorf("Publish calls by topic (-want +got):\n%s", diff)
	}

	// Each message follows the wire contract and carries Run's context
	// values.
	byUUID := make(map[string]*message.Message)
	for _, m := range pub.Messages() {
		byUUID[m.UUID] = m
	}
	for _, om := range all {
		m := byUUID[om.EventID.String()]
		if m == nil {
			t.Errorf("message %s not published", om.EventID)
			continue
		}
		if diff := cmp.Diff(om.Metadata(), map[string]string(m.Metadata)); diff != "" {
			t.Errorf("message %s metadata (-want +got):\n%s", om.EventID, diff)
		}
		if got, want := string(m.Payload), string(om.Payload); got != want {
			t.Errorf("message %s payload = %s, want %s", om.EventID, got, want)
		}
		if got := m.Context().Value(ctxKey{}); got != "value" {
			t.Errorf("message %s context value = %v, want %q", om.EventID, got, "value")
		}
	}

	wantBatches := []relay.BatchResult{
		{Claimed: 10, Published: 10, Full: true},
		{Claimed: 10, Published: 10, Full: true},
		{Claimed: 5, Published: 5},
	}
	if diff := cmp.Diff(wantBatches, batches.Results(), errorText); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}

	// The store is told that everything was published, batch by batch.
	wantOutcomes := []relay.Outcome{
		{Published: []int64{1, 3, 5, 7, 9, 2, 4, 6, 8, 10}},
		{Published: []int64{11, 13, 15, 17, 19, 12, 14, 16, 18, 20}},
		{Published: []int64{21, 23, 25, 22, 24}},
	}
	if diff := cmp.Diff(wantOutcomes, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}

	// One Run claims under one owner, with the configured limits.
	reqs := store.Requests()
	for i, req := range reqs {
		if req.Owner == "" || req.Owner != reqs[0].Owner || req.Limit != 10 || req.MaxBytes != relay.DefaultMaxBatchBytes {
			t.Errorf("claim %d: request %+v, want owner %q (not empty), limit 10, max bytes %d", i, req, reqs[0].Owner, relay.DefaultMaxBatchBytes)
		}
	}
}

func TestRunRetriesFailedPublish(t *testing.T) {
	const failures = 3
	errBroker := errors.New("broker unavailable")
	mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond}
	mem.Add(newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"))
	store := &testStore{Store: mem}
	// The broker is down for the first three attempts: the whole batch
	// fails, and so do the relay's probes of single aggregates.
	var attempts atomic.Int32
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		if len(msgs) == 3 {
			if attempts.Add(1) <= failures {
				return errBroker
			}
			return nil
		}
		if attempts.Load() <= failures {
			return errBroker
		}
		return nil
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{
		PollInterval: never,
		MinBackoff:   time.Millisecond,
		MaxBackoff:   2 * time.Millisecond,
		Logger:       logs.logger(),
		OnBatch:      batches.OnBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
	if err := stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}

	failed := []publishCall{
		{Topic: "orders", UUIDs: uuids(1, 2, 3), Err: true},
		{Topic: "orders", UUIDs: uuids(3), Err: true}, // probe: the last aggregate alone
		{Topic: "orders", UUIDs: uuids(1), Err: true}, // probe: the first aggregate alone
	}
	want := append(append(append(failed, failed...), failed...), publishCall{Topic: "orders", UUIDs: uuids(1, 2, 3)})
	if diff := cmp.Diff(want, pub.Calls()); diff != "" {
		t.Errorf("Publish calls (-want +got):\n%s", diff)
	}

	// Every message failed with the publisher's error until the broker came
	// back; the store was told so each time.
	failedAll := []relay.Failure{{ID: 1, Err: errBroker}, {ID: 2, Err: errBroker}, {ID: 3, Err: errBroker}}
	failedBatch := relay.BatchResult{Claimed: 3, Failed: 3, Failures: failedAll}
	wantBatches := []relay.BatchResult{failedBatch, failedBatch, failedBatch, {Claimed: 3, Published: 3}}
	if diff := cmp.Diff(wantBatches, batches.Results(), errorText); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
	wantOutcomes := []relay.Outcome{{Failed: failedAll}, {Failed: failedAll}, {Failed: failedAll}, {Published: []int64{1, 2, 3}}}
	if diff := cmp.Diff(wantOutcomes, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	// Nothing was published, so no message is to blame: the store counts
	// no attempt against them (a broker outage grows no retry delay).
	for _, m := range mem.Messages() {
		if m.State != sqlstore.StatePublished || m.Attempts != 0 || !strings.Contains(m.LastError, "broker unavailable") {
			t.Errorf("message %d: published %v, attempts %d, last error %q; want published, 0 attempts, last error %q",
				m.ID, m.State == sqlstore.StatePublished, m.Attempts, m.LastError, "broker unavailable")
		}
	}

	// Each failure is logged once, and the relay backed off after each.
	for attempt := 1; attempt <= failures; attempt++ {
		logs.contains(t, fmt.Sprintf(`level=WARN msg="relay: publish failed" outbox_id=1 topic=orders event_id=01900000-0000-7000-8000-000000000001 event_type=orders.order_placed messages=3 published=0 permanent=false error="broker unavailable" attempt=%d backoff=*`, attempt))
	}
}

func TestRunRetriesFailedClaim(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"))
	errRefused := errors.New("connection refused")
	var fails atomic.Int32
	fails.Store(2)
	store := &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
		if fails.Add(-1) >= 0 {
			return relay.Batch{}, errRefused
		}
		return mem.Claim(ctx, req)
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	pub := &fakePublisher{}
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: time.Millisecond, Logger: logs.logger(), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
	if diff := cmp.Diff([]publishCall{{Topic: "orders", UUIDs: uuids(1)}}, pub.Calls()); diff != "" {
		t.Errorf("Publish calls (-want +got):\n%s", diff)
	}
	results := batches.Results()
	if len(results) != 3 || !errors.Is(results[0].Err, errRefused) || !errors.Is(results[1].Err, errRefused) || results[2].Err != nil || results[2].Published != 1 {
		t.Errorf("batches = %+v, want two failed claims wrapping %q, then one message published", results, errRefused)
	}
	logs.contains(t,
		`level=WARN msg="relay: batch failed" error="relay: claim: connection refused" claimed=0 published=0 attempt=1 backoff=*`,
		`level=WARN msg="relay: batch failed" error="relay: claim: connection refused" claimed=0 published=0 attempt=2 backoff=*`,
	)
}

// TestRunPartialFailure: a topic that fails fails only its own messages; the
// store is told exactly which were published, and the relay goes on without
// backing off.
func TestRunPartialFailure(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "good"), newMessage(2, "bad"), newMessage(3, "good"), newMessage(4, "bad"))
	claims := make(chan int, 100)
	store := &testStore{Store: mem, claims: claims}
	errUnknown := errors.New("unknown topic")
	pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
		if topic == "bad" {
			return errUnknown
		}
		return nil
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, Logger: logs.logger(), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	if n := receive(t, claims); n != 4 {
		t.Fatalf("first claim = %d messages, want 4", n)
	}
	res := batches.untilCount(t, 1)[0]

	failures := []relay.Failure{{ID: 2, Err: errUnknown}, {ID: 4, Err: errUnknown}}
	if diff := cmp.Diff(relay.BatchResult{Claimed: 4, Published: 2, Failed: 2, Failures: failures}, res, errorText); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]relay.Outcome{{Published: []int64{1, 3}, Failed: failures}}, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{1, 3}, mem.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
	for _, m := range mem.Messages() {
		if wantAttempts := int(m.ID+1) % 2; m.Attempts != wantAttempts {
			t.Errorf("message %d: attempts = %d, want %d", m.ID, m.Attempts, wantAttempts)
		}
	}

	// The publisher works, so the relay did not back off (MinBackoff is an
	// hour): a wake-up makes it claim again at once.
	r.Notify()
	receive(t, claims)
	logs.contains(t, `level=WARN msg="relay: publish failed" outbox_id=2 topic=bad event_id=01900000-0000-7000-8000-000000000002 event_type=orders.order_placed messages=2 published=2 permanent=false error="unknown topic" attempt=1`)
}

// TestRunBacksOffOnlyWhenNothingWasPublished runs in a synctest bubble, so
// that "the relay did not claim again" is a fact, not a guess: after
// synctest.Wait every goroutine of the relay is blocked, with a wake-up
// pending that a relay which does not back off would have acted on.
func TestRunBacksOffOnlyWhenNothingWasPublished(t *testing.T) {
	errDown := errors.New("broker unavailable")
	tests := []struct {
		name        string
		claimErr    error
		fails       func(topic string) bool
		markErr     error
		permanent   bool // fails returns a runtime.PermanentError
		wantBackoff bool
	}{
		{name: "claim fails", claimErr: errors.New("connection refused"), wantBackoff: true},
		{name: "nothing published", fails: func(string) bool { return true }, wantBackoff: true},
		{name: "marking fails", markErr: errors.New("mark: database is read-only"), wantBackoff: true},
		{name: "partly published", fails: func(topic string) bool { return topic == "b" }},
		// Messages rejected for good are the messages' fault, not an
		// outage: the store parks them and the relay goes on.
		{name: "only permanent failures", fails: func(string) bool { return true }, permanent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				claims := make(chan int, 100)
				var claimed atomic.Int32
				store := &testStore{
					claims: claims,
					claim: func(context.Context, relay.ClaimRequest) (relay.Batch, error) {
						if tt.claimErr != nil {
							return relay.Batch{}, tt.claimErr
						}
						if claimed.Add(1) > 1 && !tt.wantBackoff {
							return relay.Batch{}, nil
						}
						return relay.Batch{Messages: []runtime.OutboxMessage{newMessage(1, "a"), newMessage(2, "b")}}, nil
					},
					mark: func(context.Context, relay.Batch, relay.Outcome) error { return tt.markErr },
				}
				pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
					if tt.fails != nil && tt.fails(topic) {
						if tt.permanent {
							return runtime.Permanent(errors.New("message too large"))
						}
						return errDown
					}
					return nil
				}}
				batches := newBatchRecorder()
				var (
					r    *relay.Relay
					once sync.Once
				)
				r, err := relay.New(store, pub, relay.Config{
					PollInterval: never,
					MinBackoff:   time.Second,
					MaxBackoff:   time.Second,
					Logger:       slog.New(slog.DiscardHandler),
					OnBatch: func(res relay.BatchResult) {
						// OnBatch runs on Run's goroutine before it
						// decides what to do next: from here on a
						// wake-up is pending.
						once.Do(func() { r.Notify() })
						batches.OnBatch(res)
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				start(t, context.Background(), r)
				receive(t, claims)
				batches.untilCount(t, 1)
				synctest.Wait()
				again := len(claims)
				if tt.wantBackoff {
					if again != 0 {
						t.Fatalf("relay claimed %d more times right after the failure, want 0: it must back off", again)
					}
					// Once the backoff has elapsed (time only passes
					// in the bubble when everything waits), it retries.
					receive(t, claims)
				} else if again == 0 {
					t.Fatalf("relay did not claim again right after the batch: it must not back off")
				}
			})
		})
	}
}

func TestNotifyWakesRelay(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	store := &testStore{Store: mem, claims: make(chan int, 100)}
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	if n := receive(t, store.claims); n != 0 {
		t.Fatalf("first claim = %d, want 0", n)
	}
	// The relay now waits for a wake-up; only Notify can give it one
	// within the test's lifetime.
	mem.Add(newMessage(1, "orders"), newMessage(2, "orders"))
	r.Notify()
	r.Notify() // coalesced, never blocks
	if n := receive(t, store.claims); n != 2 {
		t.Fatalf("claim after Notify = %d, want 2", n)
	}
	batches.untilCount(t, 1)
	if diff := cmp.Diff([]int64{1, 2}, mem.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
}

func TestNotifierDrivesRelay(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	notifies := make(chan func(), 1)
	var listens atomic.Int32
	claims := make(chan int, 100)
	store := &notifyingStore{
		Store: &testStore{Store: mem, claims: claims},
		listen: func(ctx context.Context, notify func()) error {
			if listens.Add(1) == 1 {
				return errors.New("connection reset")
			}
			notifies <- notify
			<-ctx.Done()
			return ctx.Err()
		},
	}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	if n := receive(t, claims); n != 0 {
		t.Fatalf("first claim = %d, want 0", n)
	}
	notify := receive(t, notifies) // the second Listen is listening
	mem.Add(newMessage(1, "orders"))
	notify()
	if n := receive(t, claims); n != 1 {
		t.Fatalf("claim after notification = %d, want 1", n)
	}
}

func TestListenFailuresDoNotStopPolling(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	listens := make(chan struct{}, 100)
	store := &notifyingStore{Store: mem, listen: func(context.Context, func()) error {
		listens <- struct{}{}
		return errors.New("connection refused")
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{
		PollInterval: time.Millisecond,
		MinBackoff:   time.Millisecond,
		MaxBackoff:   time.Millisecond,
		Logger:       logs.logger(),
		OnBatch:      batches.OnBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	for range 3 {
		receive(t, listens) // Listen is called again after each failure
	}
	mem.Add(newMessage(1, "orders"), newMessage(2, "orders"))
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
	if err := stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	logs.contains(t, `level=WARN msg="relay: listen failed" error="connection refused" attempt=3 backoff=*`)
}

func TestListenUnsupported(t *testing.T) {
	tests := []struct {
		name         string
		pollInterval time.Duration
		want         time.Duration
	}{
		{"default poll interval", 0, relay.DefaultPollInterval},
		{"poll interval set", never, never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &runtimetest.MemoryStore{}
			var listens atomic.Int32
			claims := make(chan int, 100)
			store := &notifyingStore{
				Store: &testStore{Store: mem, claims: claims},
				listen: func(context.Context, func()) error {
					listens.Add(1)
					return fmt.Errorf("sqlite: listen: %w", errors.ErrUnsupported)
				},
			}
			var logs logBuffer
			r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: tt.pollInterval, MinBackoff: time.Millisecond, Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			if got := relay.PollIntervalOf(r); got != tt.pollInterval && tt.pollInterval != 0 {
				t.Fatalf("poll interval before Run = %v, want %v", got, tt.pollInterval)
			}
			start(t, context.Background(), r)
			if got := relay.PollIntervalOf(r); got != tt.want {
				t.Errorf("poll interval = %v, want %v", got, tt.want)
			}
			// Notify still works, and Listen is not called again.
			receive(t, claims)
			mem.Add(newMessage(1, "orders"))
			r.Notify()
			for receive(t, claims) == 0 {
			}
			if n := listens.Load(); n != 1 {
				t.Errorf("Listen called %d times, want 1", n)
			}
			if strings.Contains(logs.String(), "listen failed") {
				t.Errorf("ErrUnsupported logged as a failure:\n%s", logs.String())
			}
		})
	}
}

// cannotNotifyStore is a Notifier that says beforehand it cannot notify,
// as sqlstore.Store does on MySQL and SQLite.
type cannotNotifyStore struct{ *notifyingStore }

func (cannotNotifyStore) CanNotify() bool { return false }

// TestStoreThatSaysItCannotNotify: a store whose CanNotify is false is
// polled from the start at the short default interval, Listen is never
// called, and the start-up log line does not claim a notifier.
func TestStoreThatSaysItCannotNotify(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	claims := make(chan int, 100)
	var listens atomic.Int32
	store := cannotNotifyStore{&notifyingStore{
		Store: &testStore{Store: mem, claims: claims},
		listen: func(context.Context, func()) error {
			listens.Add(1)
			return errors.ErrUnsupported
		},
	}}
	var logs runtimetest.LogBuffer
	r, err := relay.New(store, &fakePublisher{}, relay.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := relay.PollIntervalOf(r); got != relay.DefaultPollInterval {
		t.Errorf("poll interval before Run = %v, want %v", got, relay.DefaultPollInterval)
	}
	start(t, context.Background(), r)
	receive(t, claims)
	mem.Add(newMessage(1, "orders"))
	for receive(t, claims) == 0 { // polled: no Notify
	}
	if n := listens.Load(); n != 0 {
		t.Errorf("Listen called %d times, want 0", n)
	}
	if l := logs.String(); !strings.Contains(l, `msg="relay: started"`) || !strings.Contains(l, "notifier=false") {
		t.Errorf("start-up line does not say notifier=false:\n%s", l)
	}
	if strings.Contains(logs.String(), "cannot notify") {
		t.Errorf("a store that said it cannot notify was still asked to:\n%s", logs.String())
	}
}

// shardStore reports the shards it holds, as sqlstore.Store does.
type shardStore struct {
	*testStore
	held atomic.Int32
}

func (s *shardStore) HeldShards(string) int { return int(s.held.Load()) }

// TestShardChangesAreLogged: a relay logs at INFO each change in the
// shards it holds (a standby taking over, a lease lost), and nothing while
// they stay the same; ShardsHeld tells the count (-1 before Run).
func TestShardChangesAreLogged(t *testing.T) {
	claims := make(chan int, 1000)
	store := &shardStore{testStore: &testStore{Store: &runtimetest.MemoryStore{}, claims: claims}}
	var logs runtimetest.LogBuffer
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.ShardsHeld(); n != -1 {
		t.Errorf("ShardsHeld() before Run = %d, want -1", n)
	}
	start(t, context.Background(), r)
	lines := func() int { return strings.Count(logs.String(), `msg="relay: shards held"`) }
	waitLines := func(n int, want string) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for lines() < n {
			if time.Now().After(deadline) {
				t.Fatalf("want %d shard lines; logs:\n%s", n, logs.String())
			}
			receive(t, claims) // a round has passed
		}
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	for range 3 {
		receive(t, claims)
	}
	if n := lines(); n != 0 {
		t.Errorf("%d shard lines while holding none, want 0:\n%s", n, logs.String())
	}
	// Holding none from the start, it says once why it does nothing (a
	// restarted relay was silent while its dead predecessor's leases ran
	// out: a new user's trial).
	if n := strings.Count(logs.String(), `msg="relay: standing by`); n != 1 {
		t.Errorf("%d standing-by lines, want 1:\n%s", n, logs.String())
	}
	store.held.Store(64)
	waitLines(1, "shards=64 was=0")
	if n := r.ShardsHeld(); n != 64 {
		t.Errorf("ShardsHeld() = %d, want 64", n)
	}
	for range 3 {
		receive(t, claims)
	}
	store.held.Store(0)
	waitLines(2, "shards=0 was=64")
	if n := lines(); n != 2 {
		t.Errorf("%d shard lines, want 2:\n%s", n, logs.String())
	}
}

func TestShutdownCompletesBatchInFlight(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "a"), newMessage(2, "b"))
	store := &testStore{Store: mem}
	entered, release := make(chan struct{}, 2), make(chan struct{})
	var ctxErrs []error
	var mu sync.Mutex
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		entered <- struct{}{}
		<-release
		mu.Lock()
		ctxErrs = append(ctxErrs, msgs[0].Context().Err())
		mu.Unlock()
		return nil
	}}
	var logs runtimetest.LogBuffer
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, ShutdownTimeout: never, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := start(t, ctx, r)
	receive(t, entered) // the batch is being published
	cancel()            // Run's context is done from here on
	close(release)
	if err := stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	// The stop is logged once, saying what became of the batch in flight.
	if out := logs.String(); strings.Count(out, "stopped") != 1 || !strings.Contains(out, `msg="relay: stopped; the last batch was published and marked"`) || !strings.Contains(out, "claimed=2 published=2") {
		t.Errorf("want one stop line saying the batch in flight (2 claimed, 2 published) was marked; logs:\n%s", out)
	}
	if diff := cmp.Diff([]int64{1, 2}, mem.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]relay.Outcome{{Published: []int64{1, 2}}}, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]error{nil, nil}, ctxErrs, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
		t.Errorf("message context errors (-want +got):\n%s", diff)
	}
}

func TestShutdownTimeoutReleasesClaim(t *testing.T) {
	tests := []struct {
		name  string
		block func(msg *message.Message, stuck <-chan struct{}) error
	}{
		{"publisher honours the message context", func(msg *message.Message, _ <-chan struct{}) error {
			<-msg.Context().Done()
			return context.Cause(msg.Context())
		}},
		{"publisher ignores the message context", func(_ *message.Message, stuck <-chan struct{}) error {
			<-stuck
			return errors.New("interrupted")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &runtimetest.MemoryStore{}
			mem.Add(newMessage(1, "orders"), newMessage(2, "orders"))
			store := &releasingStore{testStore: &testStore{Store: mem}, release: mem.Release}
			entered, stuck := make(chan struct{}, 1), make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			causes := make(chan error, 1)
			pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
				entered <- struct{}{}
				err := tt.block(msgs[0], stuck)
				causes <- context.Cause(msgs[0].Context())
				return err
			}}
			var logs logBuffer
			r, err := relay.New(store, pub, relay.Config{PollInterval: never, ShutdownTimeout: 20 * time.Millisecond, Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, context.Background(), r)
			receive(t, entered)
			if err := stop(); err != nil {
				t.Errorf("Run() = %v, want nil", err)
			}
			if tt.name == "publisher honours the message context" {
				if cause := receive(t, causes); !errors.Is(cause, relay.ErrShutdownTimeout) {
					t.Errorf("message context cause = %v, want the shutdown timeout", cause)
				}
			}
			// Nothing was marked: no message published, no attempt recorded.
			if got := mem.Published(); got != nil {
				t.Errorf("published IDs = %v, want none", got)
			}
			for _, m := range mem.Messages() {
				if m.Attempts != 0 || m.LastError != "" || !m.NextAttemptAt.IsZero() {
					t.Errorf("message %d: attempts %d, last error %q, next attempt %v; want nothing recorded", m.ID, m.Attempts, m.LastError, m.NextAttemptAt)
				}
			}
			// Run released its claim: another relay claims the messages at
			// once instead of after the lease.
			b, err := mem.Claim(context.Background(), relay.ClaimRequest{Owner: "next relay", Limit: 10})
			if len(b.Messages) != 2 || err != nil {
				t.Errorf("Claim after shutdown = %d messages, %v; want 2, nil", len(b.Messages), err)
			}
			if reqs, released := store.Requests(), store.Released(); len(reqs) == 0 || !cmp.Equal(released, []string{reqs[0].Owner}) {
				t.Errorf("released owners = %q, want [the owner of the claim]", released)
			}
			logs.contains(t, `level=WARN msg="relay: shutdown timeout exceeded, batch released" claimed=2 shutdown_timeout=20ms error="relay: mark: context canceled"`)
		})
	}
}

func TestRunTwice(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	batches := newBatchRecorder()
	r, err := relay.New(mem, &fakePublisher{}, relay.Config{PollInterval: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	if err := r.Run(context.Background()); !errors.Is(err, relay.ErrRunning) {
		t.Errorf("second Run() = %v, want ErrRunning", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}

	// Once the first Run has returned, Run may be called again.
	mem.Add(newMessage(1, "orders"))
	start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
}

func TestRunReturnsAtOnceWhenCancelled(t *testing.T) {
	store := &releasingStore{testStore: &testStore{Store: &runtimetest.MemoryStore{}}}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run(cancelled ctx) = %v, want nil", err)
	}
	if reqs, released := store.Requests(), store.Released(); len(reqs) != 0 || len(released) != 0 {
		t.Errorf("Run(cancelled ctx) claimed %d times and released %q, want nothing", len(reqs), released)
	}
}

// TestRunReleasesOwnerOnStop: a store that is a Releaser is asked, once per
// Run and after Run has stopped claiming, to release the owner its claims
// were made under; each Run claims under an owner of its own.
func TestRunReleasesOwnerOnStop(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	claims := make(chan int, 100)
	var releaseCtxErrs atomic.Int32
	store := &releasingStore{
		testStore: &testStore{Store: mem, claims: claims},
		release: func(ctx context.Context, _ string) error {
			if ctx.Err() != nil {
				releaseCtxErrs.Add(1)
			}
			return ctx.Err()
		},
	}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never})
	if err != nil {
		t.Fatal(err)
	}

	stop := start(t, context.Background(), r)
	receive(t, claims)
	if err := r.Run(context.Background()); !errors.Is(err, relay.ErrRunning) {
		t.Errorf("second Run() = %v, want ErrRunning", err)
	}
	if got := store.Released(); len(got) != 0 {
		t.Errorf("released %q while running, want nothing", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	n := len(store.Requests())

	mem.Add(newMessage(1, "orders"))
	stop = start(t, context.Background(), r)
	if got := receive(t, claims); got != 1 {
		t.Fatalf("claim of the second Run = %d messages, want 1", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}

	reqs := store.Requests()
	first, second := reqs[0].Owner, reqs[n].Owner
	if first == "" || second == "" || first == second {
		t.Fatalf("owners of the two Runs = %q and %q, want two different non-empty owners", first, second)
	}
	for i, req := range reqs {
		if want := map[bool]string{true: first, false: second}[i < n]; req.Owner != want {
			t.Errorf("claim %d: owner %q, want %q", i, req.Owner, want)
		}
	}
	if diff := cmp.Diff([]string{first, second}, store.Released()); diff != "" {
		t.Errorf("released owners (-want +got):\n%s", diff)
	}
	if n := releaseCtxErrs.Load(); n != 0 {
		t.Errorf("Release got a done context %d times, want a live one (Run's is cancelled by then)", n)
	}
}

// TestRunIsolatesPoisonMessage: a message the broker rejects fails only its
// own aggregate; the other aggregates of the same topic are published.
func TestRunIsolatesPoisonMessage(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"), newMessage(4, "orders"))
	store := &testStore{Store: mem}
	errTooLarge := errors.New("message too large")
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		if hasUUID(msgs, 2) {
			return errTooLarge
		}
		return nil
	}}
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	res := batches.untilCount(t, 1)[0]
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	failures := []relay.Failure{{ID: 2, Err: errTooLarge}}
	if diff := cmp.Diff(relay.BatchResult{Claimed: 4, Published: 3, Failed: 1, Failures: failures}, res, errorText); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]relay.Outcome{{Published: []int64{1, 3, 4}, Failed: failures}}, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{1, 3, 4}, mem.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
	want := []publishCall{
		{Topic: "orders", UUIDs: uuids(1, 2, 3, 4), Err: true},
		{Topic: "orders", UUIDs: uuids(4)}, // the probe succeeds: a message is at fault
		{Topic: "orders", UUIDs: uuids(1)},
		{Topic: "orders", UUIDs: uuids(2), Err: true},
		{Topic: "orders", UUIDs: uuids(3)},
	}
	if diff := cmp.Diff(want, pub.Calls()); diff != "" {
		t.Errorf("Publish calls (-want +got):\n%s", diff)
	}
}

// TestRunFindsPoisonWithinAggregate: within the failing aggregate the relay
// publishes message by message, so the messages before the bad one go out
// and the bad one and those after it stay pending.
func TestRunFindsPoisonWithinAggregate(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	msgs := []runtime.OutboxMessage{newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"), newMessage(4, "orders")}
	for i := range 3 {
		msgs[i].AggregateID = "a" // 1, 2, 3: one aggregate; 4: another
	}
	mem.Add(msgs...)
	store := &testStore{Store: mem}
	errTooLarge := errors.New("message too large")
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		if hasUUID(msgs, 2) {
			return errTooLarge
		}
		return nil
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, Logger: logs.logger(), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	res := batches.untilCount(t, 1)[0]
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	failures := []relay.Failure{{ID: 2, Err: errTooLarge}, {ID: 3, Err: relay.ErrEarlierFailed}}
	if diff := cmp.Diff(relay.BatchResult{Claimed: 4, Published: 2, Failed: 2, Failures: failures}, res, errorText); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]relay.Outcome{{Published: []int64{1, 4}, Failed: failures}}, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{1, 4}, mem.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
	want := []publishCall{
		{Topic: "orders", UUIDs: uuids(1, 2, 3, 4), Err: true},
		{Topic: "orders", UUIDs: uuids(4)}, // the probe
		{Topic: "orders", UUIDs: uuids(1, 2, 3), Err: true},
		{Topic: "orders", UUIDs: uuids(1)},
		{Topic: "orders", UUIDs: uuids(2), Err: true},
	}
	if diff := cmp.Diff(want, pub.Calls()); diff != "" {
		t.Errorf("Publish calls (-want +got):\n%s", diff)
	}
	// One line for the message at fault; none for the one behind it.
	logs.contains(t, `level=WARN msg="relay: publish failed" outbox_id=2 topic=orders event_id=01900000-0000-7000-8000-000000000002 event_type=orders.order_placed messages=2 published=2 permanent=false error="message too large" attempt=1`)
	if strings.Contains(logs.String(), "outbox_id=3") {
		t.Errorf("logs name message 3, which was never tried:\n%s", logs.String())
	}
}

// TestRunParksPermanentFailures: a message the publisher rejects for good
// (runtime.PermanentError), and one with no topic, are reported permanent;
// the store parks them and holds their aggregates back until an operator
// unparks them, while the other aggregates go on.
func TestRunParksPermanentFailures(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	msgs := []runtime.OutboxMessage{newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"), newMessage(4, "")}
	msgs[0].AggregateID, msgs[1].AggregateID = "a", "a"
	mem.Add(msgs...)
	store := &testStore{Store: mem}
	errTooLarge := runtime.Permanent(errors.New("message too large"))
	var rejecting atomic.Bool
	rejecting.Store(true)
	pub := &fakePublisher{fn: func(topic string, msgs []*message.Message) error {
		if topic == "" {
			return errors.New("publisher called with an empty topic")
		}
		if rejecting.Load() && hasUUID(msgs, 1) {
			return errTooLarge
		}
		return nil
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, Logger: logs.logger(), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	res := batches.untilCount(t, 1)[0]
	failures := []relay.Failure{
		{ID: 1, Err: errTooLarge, Permanent: true},
		{ID: 2, Err: relay.ErrEarlierFailed},
		{ID: 4, Err: runtime.Permanent(errors.New("relay: empty topic")), Permanent: true},
	}
	if diff := cmp.Diff(relay.BatchResult{Claimed: 4, Published: 1, Failed: 3, Failures: failures}, res, errorText); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]relay.Outcome{{Published: []int64{3}, Failed: failures}}, store.Outcomes(), outcomeOpts); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	for _, m := range mem.Messages() {
		if parked := !m.ParkedAt.IsZero(); parked != (m.ID == 1 || m.ID == 4) {
			t.Errorf("message %d: parked %v, want %v", m.ID, parked, !parked)
		}
	}
	// Aggregate a waits behind its parked message; the others go on.
	m5, m6 := newMessage(5, "orders"), newMessage(6, "orders")
	m5.AggregateID = "a"
	mem.Add(m5, m6)
	r.Notify()
	batches.until(t, func() bool { return slices.Contains(mem.Published(), 6) })
	if slices.Contains(mem.Published(), 5) {
		t.Errorf("message 5 published while message 1 of its aggregate is parked")
	}
	// (The relay logs a batch after reporting it to OnBatch: by now the
	// first batch's line is written.)
	logs.contains(t, `level=WARN msg="relay: publish failed" outbox_id=1 topic=orders event_id=01900000-0000-7000-8000-000000000001 event_type=orders.order_placed messages=3 published=1 permanent=true error="outbox: permanent failure: message too large" attempt=1`)

	// An operator unparks it: its aggregate goes on, in order.
	rejecting.Store(false)
	if n, err := mem.Unpark(context.Background(), 1); n != 1 || err != nil {
		t.Fatalf("Unpark(1) = %d, %v; want 1, nil", n, err)
	}
	r.Notify()
	batches.until(t, func() bool { return cmp.Equal(mem.Pending(), []int64{4}) })
	var gotA []string
	for _, m := range pub.Messages() {
		if m.Metadata.Get(runtime.MetadataAggregateID) == "a" {
			gotA = append(gotA, m.UUID)
		}
	}
	if diff := cmp.Diff(uuids(1, 2, 5), gotA); diff != "" {
		t.Errorf("aggregate a published (-want +got):\n%s", diff)
	}
}

// TestRunMarksWhatThePublisherAcknowledged: a publisher that reports
// per-message results (runtime.PublishErrors, as adapters/kafka does) gets
// exactly the acknowledged messages marked, and nothing published twice.
func TestRunMarksWhatThePublisherAcknowledged(t *testing.T) {
	errPartition := errors.New("not leader for partition")
	errTooLarge := runtime.Permanent(errors.New("message too large"))
	tests := []struct {
		name    string
		err     error
		failure relay.Failure
	}{
		{"per-message errors", runtime.PublishErrors{nil, errPartition, nil}, relay.Failure{ID: 2, Err: errPartition}},
		{"wrapped", fmt.Errorf("kafka: write: %w", runtime.PublishErrors{nil, errPartition, nil}), relay.Failure{ID: 2, Err: errPartition}},
		{"permanent", runtime.PublishErrors{nil, errTooLarge, nil}, relay.Failure{ID: 2, Err: errTooLarge, Permanent: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond}
			mem.Add(newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"))
			store := &testStore{Store: mem}
			var calls atomic.Int32
			pub := &fakePublisher{fn: func(string, []*message.Message) error {
				if calls.Add(1) == 1 {
					return tt.err
				}
				return nil
			}}
			batches := newBatchRecorder()
			r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, OnBatch: batches.OnBatch})
			if err != nil {
				t.Fatal(err)
			}
			start(t, context.Background(), r)
			res := batches.untilCount(t, 1)[0]
			failures := []relay.Failure{tt.failure}
			if diff := cmp.Diff(relay.BatchResult{Claimed: 3, Published: 2, Failed: 1, Failures: failures}, res, errorText); diff != "" {
				t.Errorf("batch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(relay.Outcome{Published: []int64{1, 3}, Failed: failures}, store.Outcomes()[0], outcomeOpts); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
			if tt.failure.Permanent {
				if m := mem.Messages()[1]; m.ParkedAt.IsZero() {
					t.Errorf("message 2 not parked after a permanent failure")
				}
				if got := pub.Calls(); len(got) != 1 {
					t.Errorf("Publish calls = %+v, want one", got)
				}
				return
			}
			// The partial batch does not back off (MinBackoff is an
			// hour): on a wake-up, once the store's retry delay is over,
			// only the failed message is published again.
			r.Notify()
			batches.until(t, func() bool { return len(mem.Pending()) == 0 })
			want := []publishCall{
				{Topic: "orders", UUIDs: uuids(1, 2, 3), Err: true},
				{Topic: "orders", UUIDs: uuids(2)},
			}
			if diff := cmp.Diff(want, pub.Calls()); diff != "" {
				t.Errorf("Publish calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStoreTimeoutBoundsStoreCalls: a store call that hangs (a half-open
// connection: it answers nothing, only its context ends it) is cut off after
// StoreTimeout, and the relay goes on.
func TestStoreTimeoutBoundsStoreCalls(t *testing.T) {
	const storeTimeout = 20 * time.Millisecond
	hang := func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("store called without a deadline")
		}
		<-ctx.Done()
		return ctx.Err()
	}

	t.Run("Claim", func(t *testing.T) {
		mem := &runtimetest.MemoryStore{}
		mem.Add(newMessage(1, "orders"))
		var hung atomic.Bool
		store := &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
			if hung.CompareAndSwap(false, true) {
				return relay.Batch{}, hang(ctx)
			}
			return mem.Claim(ctx, req)
		}}
		batches := newBatchRecorder()
		r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, StoreTimeout: storeTimeout, MinBackoff: time.Millisecond, OnBatch: batches.OnBatch})
		if err != nil {
			t.Fatal(err)
		}
		start(t, context.Background(), r)
		batches.until(t, func() bool { return len(mem.Pending()) == 0 })
		if err := batches.Results()[0].Err; !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "relay: claim: ") {
			t.Errorf("first batch Err = %v, want a claim that ran out of time", err)
		}
	})

	t.Run("Mark", func(t *testing.T) {
		mem := &runtimetest.MemoryStore{}
		mem.Add(newMessage(1, "orders"))
		claims := make(chan int, 100)
		var hung atomic.Bool
		store := &testStore{Store: mem, claims: claims, mark: func(ctx context.Context, b relay.Batch, o relay.Outcome) error {
			if hung.CompareAndSwap(false, true) {
				return hang(ctx)
			}
			return mem.Mark(ctx, b, o)
		}}
		batches := newBatchRecorder()
		r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, StoreTimeout: storeTimeout, MinBackoff: time.Millisecond, OnBatch: batches.OnBatch})
		if err != nil {
			t.Fatal(err)
		}
		start(t, context.Background(), r)
		if n := receive(t, claims); n != 1 {
			t.Fatalf("first claim = %d messages, want 1", n)
		}
		// The relay backs off and claims again (the message is still
		// leased to it, so it gets nothing until the lease ends).
		receive(t, claims)
		if err := batches.Results()[0].Err; !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "relay: mark: ") {
			t.Errorf("first batch Err = %v, want a mark that ran out of time", err)
		}
	})

	t.Run("Release", func(t *testing.T) {
		store := &releasingStore{
			testStore: &testStore{Store: &runtimetest.MemoryStore{}},
			release:   func(ctx context.Context, _ string) error { return hang(ctx) },
		}
		var logs logBuffer
		r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, StoreTimeout: storeTimeout, Logger: logs.logger()})
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, context.Background(), r)
		if err := stop(); err != nil {
			t.Fatalf("Run() = %v, want nil once Release has run out of time", err)
		}
		logs.contains(t, `level=WARN msg="relay: release failed" error="context deadline exceeded"`)
	})
}

// TestPublishTimeoutAbandonsHungPublisher: a Publish call that does not
// return is abandoned after PublishTimeout (its messages' contexts are
// cancelled), the batch is marked failed, and the relay goes on.
func TestPublishTimeoutAbandonsHungPublisher(t *testing.T) {
	for _, honour := range []bool{true, false} {
		name := map[bool]string{true: "publisher honours the message context", false: "publisher ignores the message context"}[honour]
		t.Run(name, func(t *testing.T) {
			mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond}
			mem.Add(newMessage(1, "orders"))
			store := &testStore{Store: mem}
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			deadlines := make(chan time.Time, 1)
			var calls atomic.Int32
			pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
				if calls.Add(1) > 1 {
					return nil
				}
				ctx := msgs[0].Context()
				dl, _ := ctx.Deadline()
				deadlines <- dl
				if honour {
					<-ctx.Done()
					return context.Cause(ctx)
				}
				<-stuck
				return errors.New("too late")
			}}
			batches := newBatchRecorder()
			r, err := relay.New(store, pub, relay.Config{PollInterval: never, PublishTimeout: 100 * time.Millisecond, MinBackoff: time.Millisecond, OnBatch: batches.OnBatch})
			if err != nil {
				t.Fatal(err)
			}
			start(t, context.Background(), r)
			batches.until(t, func() bool { return len(mem.Pending()) == 0 })

			res := batches.Results()[0]
			if res.Claimed != 1 || res.Published != 0 || len(res.Failures) != 1 || !errors.Is(res.Failures[0].Err, relay.ErrPublishDeadline) {
				t.Errorf("first batch = %+v, want message 1 failed by the publish deadline", res)
			}
			// The deadline was PublishTimeout's, long before the lease's.
			// (On a very slow machine it may pass before Publish is
			// even called; the batch then fails as it did above.)
			select {
			case dl := <-deadlines:
				if lease := store.Batches()[0].Deadline; dl.IsZero() || !dl.Before(lease) {
					t.Errorf("message context deadline = %v, want one before the lease's end %v", dl, lease)
				}
			default:
				t.Log("the publish deadline passed before Publish was called")
			}
		})
	}
}

// TestPublishStopsAtLeaseDeadline: a batch whose lease (Batch.Deadline) ends
// before PublishTimeout stops publishing when the lease ends.
func TestPublishStopsAtLeaseDeadline(t *testing.T) {
	tests := []struct {
		name   string
		lease  time.Duration // from the claim
		honour bool
	}{
		{"publisher honours the message context", 100 * time.Millisecond, true},
		{"publisher ignores the message context", 100 * time.Millisecond, false},
		{"lease already over", -time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond}
			mem.Add(newMessage(1, "orders"))
			var claimed atomic.Int32
			store := &testStore{Store: mem}
			store.claim = func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
				b, err := mem.Claim(ctx, req)
				if len(b.Messages) > 0 && claimed.Add(1) == 1 {
					b.Deadline = time.Now().Add(tt.lease)
				}
				return b, err
			}
			stuck := make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			deadlines := make(chan time.Time, 1)
			var calls atomic.Int32
			pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
				if tt.lease < 0 || calls.Add(1) > 1 {
					return nil
				}
				ctx := msgs[0].Context()
				dl, _ := ctx.Deadline()
				deadlines <- dl
				if tt.honour {
					<-ctx.Done()
					return context.Cause(ctx)
				}
				<-stuck
				return errors.New("too late")
			}}
			batches := newBatchRecorder()
			r, err := relay.New(store, pub, relay.Config{PollInterval: never, PublishTimeout: never, MinBackoff: time.Millisecond, OnBatch: batches.OnBatch})
			if err != nil {
				t.Fatal(err)
			}
			start(t, context.Background(), r)
			batches.until(t, func() bool { return len(mem.Pending()) == 0 })

			res := batches.Results()[0]
			if res.Claimed != 1 || res.Published != 0 || len(res.Failures) != 1 || !errors.Is(res.Failures[0].Err, relay.ErrLeaseEnded) {
				t.Errorf("first batch = %+v, want message 1 failed by the end of its lease", res)
			}
			lease := store.Batches()[0].Deadline
			if tt.lease < 0 {
				// Not even tried: the only Publish call is the retry's.
				if got := pub.Calls(); len(got) != 1 {
					t.Errorf("Publish calls = %+v, want only the retry's", got)
				}
				return
			}
			select {
			case dl := <-deadlines:
				if !dl.Equal(lease) {
					t.Errorf("message context deadline = %v, want the lease's end %v", dl, lease)
				}
			default:
				// On a very slow machine the lease may end before Publish
				// is even called; the batch then fails as it did above.
				t.Log("the lease ended before Publish was called")
			}
		})
	}
}

// TestMaxBatchBytes: the byte cap goes to the store with every claim, and a
// batch that reaches it counts as full, so the relay claims again at once.
func TestMaxBatchBytes(t *testing.T) {
	const maxBytes = 20
	sized := func(n, size int) runtime.OutboxMessage {
		m := newMessage(n, "orders")
		m.Payload = []byte(fmt.Sprintf("%0*d", size, n))
		return m
	}
	tests := []struct {
		name  string
		sizes []int
		want  []relay.BatchResult
	}{
		{
			name:  "batches reach the cap",
			sizes: []int{10, 10, 10, 10, 10},
			want:  []relay.BatchResult{{Claimed: 2, Published: 2, Full: true}, {Claimed: 2, Published: 2, Full: true}, {Claimed: 1, Published: 1, Full: true}},
		},
		{
			// The store stops before a message that would overshoot the
			// cap: past half of it, the relay claims again at once.
			name:  "the store stops short of the cap",
			sizes: []int{8, 8, 8, 4},
			want:  []relay.BatchResult{{Claimed: 2, Published: 2, Full: true}, {Claimed: 2, Published: 2, Full: true}},
		},
		{
			name:  "one message larger than the cap",
			sizes: []int{50, 10, 10},
			want:  []relay.BatchResult{{Claimed: 1, Published: 1, Full: true}, {Claimed: 2, Published: 2, Full: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := &runtimetest.MemoryStore{}
			for i, size := range tt.sizes {
				mem.Add(sized(i+1, size))
			}
			store := &testStore{Store: mem}
			batches := newBatchRecorder()
			r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, MaxBatchBytes: maxBytes, OnBatch: batches.OnBatch})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, context.Background(), r)
			// No wake-up comes: only full batches make the relay claim again.
			batches.until(t, func() bool { return len(mem.Pending()) == 0 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, batches.Results(), errorText); diff != "" {
				t.Errorf("batches (-want +got):\n%s", diff)
			}
			for i, req := range store.Requests() {
				if req.MaxBytes != maxBytes || req.Limit != relay.DefaultBatchSize {
					t.Errorf("claim %d: request %+v, want MaxBytes %d, Limit %d", i, req, maxBytes, relay.DefaultBatchSize)
				}
			}
		})
	}
}

// TestNilLoggerLogsToSlogDefault replaces the process's default logger, so
// it must not run in parallel with other tests.
func TestNilLoggerLogsToSlogDefault(t *testing.T) {
	var logs logBuffer
	prev, prevOut, prevFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(logs.logger())
	t.Cleanup(func() {
		slog.SetDefault(prev)
		// SetDefault redirected the log package; restore it too.
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	})

	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"))
	var failed atomic.Bool
	store := &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
		if failed.CompareAndSwap(false, true) {
			return relay.Batch{}, errors.New("connection refused")
		}
		return mem.Claim(ctx, req)
	}}
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, MinBackoff: time.Millisecond, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	logs.contains(t, `level=WARN msg="relay: batch failed" error="relay: claim: connection refused" claimed=0 published=0 attempt=1 backoff=*`)
}

// TestSlowTopicDoesNotDelayOthers: the topics of a batch are published
// concurrently; the slow topic's Publish returns only once the other topic
// has been published.
func TestSlowTopicDoesNotDelayOthers(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "slow"), newMessage(2, "fast"))
	fastDone := make(chan struct{})
	pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
		if topic == "fast" {
			close(fastDone)
			return nil
		}
		select {
		case <-fastDone:
			return nil
		case <-time.After(waitTimeout):
			return errors.New("the fast topic was not published while the slow one was in flight")
		}
	}}
	batches := newBatchRecorder()
	r, err := relay.New(mem, pub, relay.Config{PollInterval: never, PublishConcurrency: 2, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	res := batches.untilCount(t, 1)[0]
	if diff := cmp.Diff(relay.BatchResult{Claimed: 2, Published: 2}, res, errorText); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
}

// TestPublishConcurrencyBoundsTopicsInFlight runs in a synctest bubble: once
// every goroutine is blocked, the number of Publish calls in flight is exact.
func TestPublishConcurrencyBoundsTopicsInFlight(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		want        int
	}{
		{"one", 1, 1},
		{"two", 2, 2},
		{"default", 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := &runtimetest.MemoryStore{}
				mem.Add(newMessage(1, "t1"), newMessage(2, "t2"), newMessage(3, "t3"))
				release := make(chan struct{})
				var inFlight atomic.Int32
				pub := &fakePublisher{fn: func(string, []*message.Message) error {
					inFlight.Add(1)
					<-release
					return nil
				}}
				batches := newBatchRecorder()
				r, err := relay.New(mem, pub, relay.Config{PollInterval: never, PublishConcurrency: tt.concurrency, OnBatch: batches.OnBatch})
				if err != nil {
					t.Fatal(err)
				}
				start(t, context.Background(), r)
				synctest.Wait()
				if n := inFlight.Load(); n != int32(tt.want) {
					t.Errorf("Publish calls in flight = %d, want %d", n, tt.want)
				}
				close(release)
				if res := batches.untilCount(t, 1)[0]; res.Published != 3 {
					t.Errorf("batch = %+v, want 3 published", res)
				}
			})
		})
	}
}

// TestErrorsLogOnOneLine: an error wrapped by github.com/pkg/errors (as some
// Watermill adapters return) is logged as its message, not with the stack
// trace that slog's %+v formatting would print.
func TestErrorsLogOnOneLine(t *testing.T) {
	mem := &runtimetest.MemoryStore{RetryDelay: time.Millisecond}
	mem.Add(newMessage(1, "orders"))
	var failed atomic.Bool
	pub := &fakePublisher{fn: func(string, []*message.Message) error {
		if failed.CompareAndSwap(false, true) {
			return pkgerrors.Wrap(errors.New("channel closed"), "cannot publish")
		}
		return nil
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(mem, pub, relay.Config{PollInterval: 5 * time.Millisecond, MinBackoff: time.Millisecond, Logger: logs.logger(), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `error="cannot publish: channel closed"`) || strings.Contains(out, ".go:") || strings.Count(out, "\n") != strings.Count(out, "level=") {
		t.Errorf("logs = %q; want one line per record, the error's message without a stack trace", out)
	}
}

// TestRunVerifiesPermanentFailuresOfABatch: a broker refuses a whole
// partition batch when one of its records is too large, and the client
// reports that error for every record of the batch; the relay publishes
// such messages again one by one, so only the one that fails on its own is
// parked and the healthy message that shared its batch is published.
func TestRunVerifiesPermanentFailuresOfABatch(t *testing.T) {
	mem := &runtimetest.MemoryStore{RetryDelay: time.Nanosecond}
	poison, healthy := newMessage(1, "orders"), newMessage(2, "orders")
	poison.Payload = []byte(`{"big":true}`)
	mem.Add(poison, healthy)
	errTooLarge := runtime.Permanent(errors.New("message too large"))
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		for _, m := range msgs {
			if string(m.Payload) == `{"big":true}` {
				errs := make(runtime.PublishErrors, len(msgs))
				for i := range errs {
					errs[i] = errTooLarge // the whole batch refused
				}
				return errs
			}
		}
		return nil
	}}
	batches := newBatchRecorder()
	r, err := relay.New(mem, pub, relay.Config{PollInterval: never, MinBackoff: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	res := batches.untilCount(t, 1)[0]
	if res.Published != 1 || res.Failed != 1 || !res.Failures[0].Permanent || res.Failures[0].ID != 1 {
		t.Errorf("batch = %+v; want message 2 published and only message 1 failed permanently", res)
	}
	if diff := cmp.Diff([]int64{2}, mem.Published()); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}

// TestRunKeepsAnAggregatesOrderAcrossTopics: aggregate x's messages go to
// topics a, b, a (hooks.Config.Topic can send an aggregate's events to
// several topics). The relay publishes them in that order, each only once
// the one before is acknowledged: when x's message on b fails, for good or
// not, x's later message on a is not published (it used to be, in the same
// batch, beside the first: the later event reached the broker, the earlier
// one was parked or retried after it). Aggregate y, on a alone, is not
// held back.
func TestRunKeepsAnAggregatesOrderAcrossTopics(t *testing.T) {
	for _, tt := range []struct {
		name      string
		err       error // of every publish to topic b
		permanent bool
	}{
		{name: "published"},
		{name: "retryable failure", err: errors.New("broker unavailable")},
		{name: "permanent failure", err: runtime.Permanent(errors.New("invalid topic")), permanent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msgs := []runtime.OutboxMessage{newMessage(1, "a"), newMessage(2, "b"), newMessage(3, "a"), newMessage(4, "a")}
			for i := range 3 {
				msgs[i].AggregateID = "x"
			}
			mem := &runtimetest.MemoryStore{}
			mem.Add(msgs...)
			store := &testStore{Store: mem}
			pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
				if topic == "b" {
					return tt.err
				}
				return nil
			}}
			batches := newBatchRecorder()
			r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, Logger: slog.New(slog.DiscardHandler), OnBatch: batches.OnBatch})
			if err != nil {
				t.Fatal(err)
			}
			start(t, context.Background(), r)
			batches.untilCount(t, 1)

			want := []publishCall{
				{Topic: "a", UUIDs: uuids(1, 4)},
				{Topic: "b", UUIDs: uuids(2), Err: tt.err != nil},
			}
			if tt.permanent {
				// The relay blames a permanent failure on a message only
				// once it fails on its own: a second call.
				want = append(want, want[1])
			}
			wantOutcome := relay.Outcome{Published: []int64{1, 4}}
			if tt.err == nil {
				want = append(want, publishCall{Topic: "a", UUIDs: uuids(3)})
				wantOutcome.Published = []int64{1, 4, 2, 3}
			} else {
				wantOutcome.Failed = []relay.Failure{
					{ID: 2, Err: tt.err, Permanent: tt.permanent},
					{ID: 3, Err: errors.New("relay: not published: an earlier message of its aggregate failed")},
				}
			}
			if diff := cmp.Diff(want, pub.Calls()); diff != "" {
				t.Errorf("publish calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]relay.Outcome{wantOutcome}, store.Outcomes()[:1], outcomeOpts); diff != "" {
				t.Errorf("first outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunWarnsOfAPublisherThatAcknowledgesPastAFailure: a publisher whose
// per-message errors say that it wrote a message after an earlier message
// of its aggregate failed broke PublishErrors' contract; the relay cannot
// undo it, and says so.
func TestRunWarnsOfAPublisherThatAcknowledgesPastAFailure(t *testing.T) {
	msgs := []runtime.OutboxMessage{newMessage(1, "a"), newMessage(2, "a"), newMessage(3, "a")}
	for i := range msgs {
		msgs[i].AggregateID = "x"
	}
	mem := &runtimetest.MemoryStore{}
	mem.Add(msgs...)
	pub := &fakePublisher{fn: func(string, []*message.Message) error {
		return runtime.PublishErrors{nil, errors.New("rejected"), nil}
	}}
	var logs logBuffer
	batches := newBatchRecorder()
	r, err := relay.New(mem, pub, relay.Config{PollInterval: never, MinBackoff: never, Logger: logs.logger(), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.untilCount(t, 1)
	logs.contains(t, `level=WARN msg="relay: the publisher acknowledged a message after an earlier message of its aggregate failed in the same call; that aggregate is out of order on the broker" outbox_id=3 topic=a`)
}

// TestFailuresNamingTheirMessageLogOnce: a publisher that fails every
// message of a batch with an error naming the message (as adapters do:
// "publish message <id> to topic ...: EOF") logs one "publish failed" line
// per round, not one per message up to five (a new user's trial read five
// lines of messages=1000 as five thousand failures).
func TestFailuresNamingTheirMessageLogOnce(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"))
	claims := make(chan int, 100)
	store := &testStore{Store: mem, claims: claims}
	pub := &fakePublisher{fn: func(topic string, msgs []*message.Message) error {
		errs := make(runtime.PublishErrors, len(msgs))
		for i, m := range msgs {
			errs[i] = fmt.Errorf("publish message %s to topic %q: EOF", m.UUID, topic)
		}
		return errs
	}}
	var logs logBuffer
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, MinBackoff: never, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	receive(t, claims)
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(logs.String(), "publish failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no publish failed line:\n%s", logs.String())
		}
		time.Sleep(time.Millisecond) // polling the log
	}
	if n := strings.Count(logs.String(), `msg="relay: publish failed"`); n != 1 {
		t.Errorf("%d publish failed lines for one round failing 3 messages alike, want 1:\n%s", n, logs.String())
	}
}
