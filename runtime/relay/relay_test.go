package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

type ctxKey struct{}

func TestRunPublishesEachMessageOnceInOrder(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	var all []runtime.OutboxMessage
	for n := 1; n <= 25; n++ {
		topic := "a"
		if n%2 == 0 {
			topic = "b"
		}
		all = append(all, newMessage(n, topic))
	}
	store.Add(all...)
	pub := &fakePublisher{}
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: 10, PollInterval: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.WithValue(context.Background(), ctxKey{}, "value"), r)
	batches.until(t, func() bool { return len(store.Pending()) == 0 })

	// Full batches are claimed back to back; each batch makes one
	// Publish call per topic, in ID order.
	want := []publishCall{
		{Topic: "a", UUIDs: uuids(1, 3, 5, 7, 9)},
		{Topic: "b", UUIDs: uuids(2, 4, 6, 8, 10)},
		{Topic: "a", UUIDs: uuids(11, 13, 15, 17, 19)},
		{Topic: "b", UUIDs: uuids(12, 14, 16, 18, 20)},
		{Topic: "a", UUIDs: uuids(21, 23, 25)},
		{Topic: "b", UUIDs: uuids(22, 24)},
	}
	if diff := cmp.Diff(want, pub.Calls()); diff != "" {
		t.Errorf("Publish calls (-want +got):\n%s", diff)
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

	wantBatches := []relay.BatchResult{{Claimed: 10, Published: 10}, {Claimed: 10, Published: 10}, {Claimed: 5, Published: 5}}
	if diff := cmp.Diff(wantBatches, batches.Results()); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
}

func TestRunRetriesFailedPublish(t *testing.T) {
	const failures = 3
	errBroker := errors.New("broker unavailable")
	store := &runtimetest.MemoryStore{}
	store.Add(newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"))
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
	batches.until(t, func() bool { return len(store.Pending()) == 0 })
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
	for _, m := range store.Messages() {
		if !m.Published() || m.Attempts != failures || !strings.Contains(m.LastError, "broker unavailable") {
			t.Errorf("message %d: published %v, attempts %d, last error %q; want published after %d attempts failing with %q",
				m.ID, m.Published(), m.Attempts, m.LastError, failures, "broker unavailable")
		}
	}

	results := batches.Results()
	if len(results) != failures+1 || results[failures].Err != nil {
		t.Fatalf("batches = %v, want %d failures and a success", results, failures)
	}
	for i, res := range results[:failures] {
		var pe *relay.PublishError
		if !errors.As(res.Err, &pe) || !errors.Is(res.Err, errBroker) {
			t.Fatalf("batch %d: Err = %v, want a *relay.PublishError wrapping the publisher's error", i, res.Err)
		}
		if diff := cmp.Diff(&relay.PublishError{Topic: "orders", IDs: []int64{1, 2, 3}}, pe, cmp.FilterPath(func(p cmp.Path) bool {
			return p.Last().String() == ".Err"
		}, cmp.Ignore())); diff != "" {
			t.Errorf("batch %d: PublishError (-want +got):\n%s", i, diff)
		}
	}

	for attempt := 1; attempt <= failures; attempt++ {
		line := `level=WARN msg="relay: publish failed" topic=orders outbox_id=1 messages=3 error="broker unavailable" attempt=` + string(rune('0'+attempt))
		if !strings.Contains(logs.String(), line+"\n") {
			t.Errorf("logs do not contain %q:\n%s", line, logs.String())
		}
	}
}

func TestRunRetriesFailedClaim(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"))
	var fails atomic.Int32
	fails.Store(2)
	store := claimFunc(func(ctx context.Context, limit int, publish relay.PublishFunc) (int, error) {
		if fails.Add(-1) >= 0 {
			return 0, errors.New("connection refused")
		}
		return mem.Claim(ctx, limit, publish)
	})
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
	for _, line := range []string{
		`level=WARN msg="relay: claim failed" error="connection refused" claimed=0 attempt=1`,
		`level=WARN msg="relay: claim failed" error="connection refused" claimed=0 attempt=2`,
	} {
		if !strings.Contains(logs.String(), line+"\n") {
			t.Errorf("logs do not contain %q:\n%s", line, logs.String())
		}
	}
}

type claimFunc func(ctx context.Context, limit int, publish relay.PublishFunc) (int, error)

func (f claimFunc) Claim(ctx context.Context, limit int, publish relay.PublishFunc) (int, error) {
	return f(ctx, limit, publish)
}

func TestRunPartialFailure(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	store.Add(newMessage(1, "good"), newMessage(2, "bad"), newMessage(3, "good"), newMessage(4, "bad"))
	pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
		if topic == "bad" {
			return errors.New("unknown topic")
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

	if res.Claimed != 4 || res.Published != 2 {
		t.Errorf("batch claimed %d, published %d; want 4, 2", res.Claimed, res.Published)
	}
	var pe *relay.PublishError
	if !errors.As(res.Err, &pe) || pe.Topic != "bad" || !cmp.Equal(pe.IDs, []int64{2, 4}) {
		t.Errorf("batch Err = %v, want a *relay.PublishError for topic bad, IDs [2 4]", res.Err)
	}
	if diff := cmp.Diff([]int64{1, 3}, store.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
	for _, m := range store.Messages() {
		if wantAttempts := int(m.ID+1) % 2; m.Attempts != wantAttempts {
			t.Errorf("message %d: attempts = %d, want %d", m.ID, m.Attempts, wantAttempts)
		}
	}
}

func TestNotifyWakesRelay(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	store := &signallingStore{Store: mem, claims: make(chan int, 100)}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never})
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
	if diff := cmp.Diff([]int64{1, 2}, mem.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
}

func TestNotifierDrivesRelay(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	notifies := make(chan func(), 1)
	var listens atomic.Int32
	store := &notifyingStore{
		Store: &signallingStore{Store: mem, claims: make(chan int, 100)},
		listen: func(ctx context.Context, notify func()) error {
			if listens.Add(1) == 1 {
				return errors.New("connection reset")
			}
			notifies <- notify
			<-ctx.Done()
			return ctx.Err()
		},
	}
	claims := store.Store.(*signallingStore).claims
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
	line := `level=WARN msg="relay: listen failed" error="connection refused" attempt=3`
	if !strings.Contains(logs.String(), line+"\n") {
		t.Errorf("logs do not contain %q:\n%s", line, logs.String())
	}
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
				Store: &signallingStore{Store: mem, claims: claims},
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

func TestShutdownCompletesBatchInFlight(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	store.Add(newMessage(1, "a"), newMessage(2, "b"))
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
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, ShutdownTimeout: never})
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
	if diff := cmp.Diff([]int64{1, 2}, store.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
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
		block func(msg *message.Message, stuck <-chan struct{})
	}{
		{"publisher honours the message context", func(msg *message.Message, _ <-chan struct{}) { <-msg.Context().Done() }},
		{"publisher ignores the message context", func(_ *message.Message, stuck <-chan struct{}) { <-stuck }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &runtimetest.MemoryStore{}
			store.Add(newMessage(1, "orders"), newMessage(2, "orders"))
			entered, stuck := make(chan struct{}, 1), make(chan struct{})
			t.Cleanup(func() { close(stuck) })
			pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
				entered <- struct{}{}
				tt.block(msgs[0], stuck)
				return errors.New("interrupted")
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
			if got := store.Published(); got != nil {
				t.Errorf("published IDs = %v, want none", got)
			}
			for _, m := range store.Messages() {
				if m.Attempts != 0 {
					t.Errorf("message %d: attempts = %d, want 0 (rolled back)", m.ID, m.Attempts)
				}
			}
			// The claim was released: the messages can be claimed again.
			n, err := store.Claim(context.Background(), 10, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
				return []int64{msgs[0].ID, msgs[1].ID}, nil
			})
			if n != 2 || err != nil {
				t.Errorf("Claim after shutdown = %d, %v; want 2, nil", n, err)
			}
			line := `level=WARN msg="relay: shutdown timeout exceeded, batch released" claimed=2 shutdown_timeout=20ms error="context canceled"`
			if !strings.Contains(logs.String(), line+"\n") {
				t.Errorf("logs do not contain %q:\n%s", line, logs.String())
			}
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
	r, err := relay.New(&runtimetest.MemoryStore{}, &fakePublisher{}, relay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run(cancelled ctx) = %v, want nil", err)
	}
}

// receive returns the next value from c, failing the test after waitTimeout.
func receive[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatal("timed out")
		var zero T
		return zero
	}
}

// TestRunIsolatesPoisonMessage: a message the broker rejects fails only its
// own aggregate; the other aggregates of the same topic are published.
func TestRunIsolatesPoisonMessage(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	store.Add(newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"), newMessage(4, "orders"))
	poison := eventID(2).String()
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		for _, m := range msgs {
			if m.UUID == poison {
				return errors.New("message too large")
			}
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
	if res.Claimed != 4 || res.Published != 3 {
		t.Errorf("batch claimed %d, published %d; want 4, 3", res.Claimed, res.Published)
	}
	var pe *relay.PublishError
	if !errors.As(res.Err, &pe) || !cmp.Equal(pe.IDs, []int64{2}) {
		t.Errorf("batch Err = %v, want a *relay.PublishError for ID 2 only", res.Err)
	}
	if diff := cmp.Diff([]int64{1, 3, 4}, store.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
	want := []publishCall{
		{Topic: "orders", UUIDs: uuids(1, 2, 3, 4), Err: true},
		{Topic: "orders", UUIDs: uuids(4)}, // the probe succeeds: a message is at fault
		{Topic: "orders", UUIDs: uuids(1)},
		{Topic: "orders", UUIDs: uuids(2), Err: true},
		{Topic: "orders", UUIDs: uuids(3)},
	}
	if diff := cmp.Diff(want, pub.Calls()[:5]); diff != "" {
		t.Errorf("Publish calls (-want +got):\n%s", diff)
	}
}

// TestRunFindsPoisonWithinAggregate: within the failing aggregate the relay
// publishes message by message, so the messages before the bad one go out
// and the bad one and those after it stay pending.
func TestRunFindsPoisonWithinAggregate(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	msgs := []runtime.OutboxMessage{newMessage(1, "orders"), newMessage(2, "orders"), newMessage(3, "orders"), newMessage(4, "orders")}
	for i := range 3 {
		msgs[i].AggregateID = "a" // 1, 2, 3: one aggregate; 4: another
	}
	store.Add(msgs...)
	poison := eventID(2).String()
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		for _, m := range msgs {
			if m.UUID == poison {
				return errors.New("message too large")
			}
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
	var pe *relay.PublishError
	if !errors.As(res.Err, &pe) || !cmp.Equal(pe.IDs, []int64{2, 3}) {
		t.Errorf("batch Err = %v, want a *relay.PublishError for IDs [2 3]", res.Err)
	}
	if diff := cmp.Diff([]int64{1, 4}, store.Published()); diff != "" {
		t.Errorf("published IDs (-want +got):\n%s", diff)
	}
}

// TestRunBacksOffWhenMarkingFails: a store that publishes but then fails to
// mark (the database refuses the UPDATE) must not make the relay republish
// the batch in a tight loop.
func TestRunBacksOffWhenMarkingFails(t *testing.T) {
	var claims atomic.Int32
	store := claimFunc(func(ctx context.Context, limit int, publish relay.PublishFunc) (int, error) {
		claims.Add(1)
		msgs := []runtime.OutboxMessage{newMessage(1, "orders")}
		if _, err := publish(ctx, msgs); err != nil {
			return 1, err
		}
		return 1, errors.New("mark: database is read-only")
	})
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{BatchSize: 1, MinBackoff: time.Hour, PollInterval: never, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, context.Background(), r)
	batches.untilCount(t, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := claims.Load(); n != 1 {
		t.Errorf("claims = %d, want 1: a failed mark must back off (MinBackoff is an hour)", n)
	}
}
