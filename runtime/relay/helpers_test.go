package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// waitTimeout bounds every wait in these tests; reaching it is a failure,
// never a way to synchronise.
const waitTimeout = 10 * time.Second

// never is a poll interval or backoff long enough that a test passing with it
// did not rely on it elapsing.
const never = time.Hour

// eventID returns a fixed event id for message n.
func eventID(n int) uuid.UUID {
	return uuid.MustParse(fmt.Sprintf("01900000-0000-7000-8000-%012d", n))
}

// newMessage returns message n for topic. The memory store gives the n-th
// message it is handed the ID n, so tests add messages 1, 2, ... in order.
func newMessage(n int, topic string) runtime.OutboxMessage {
	return runtime.OutboxMessage{
		Topic: topic,
		Envelope: runtime.Envelope{
			EventID:       eventID(n),
			EventType:     "orders.order_placed",
			EventVersion:  1,
			AggregateType: "order",
			AggregateID:   fmt.Sprint(n),
			OccurredAt:    time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
			Headers:       map[string]string{runtime.MetadataCorrelationID: fmt.Sprintf("corr-%d", n)},
			Payload:       fmt.Appendf(nil, `{"n":%d}`, n),
		},
	}
}

// publishCall is one recorded Publish call.
type publishCall struct {
	Topic string
	UUIDs []string
	Err   bool
}

// fakePublisher records Publish calls. fn, when set, runs first and its error
// is returned.
type fakePublisher struct {
	fn func(topic string, msgs []*message.Message) error

	mu    sync.Mutex
	calls []publishCall
	msgs  []*message.Message // copies of the messages of successful calls
}

func (p *fakePublisher) Publish(topic string, msgs ...*message.Message) error {
	var err error
	if p.fn != nil {
		err = p.fn(topic, msgs)
	}
	call := publishCall{Topic: topic, Err: err != nil}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		call.UUIDs = append(call.UUIDs, m.UUID)
		if err == nil {
			p.msgs = append(p.msgs, m.CopyWithContext())
		}
	}
	p.calls = append(p.calls, call)
	return err
}

func (p *fakePublisher) Close() error { return nil }

func (p *fakePublisher) Calls() []publishCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]publishCall(nil), p.calls...)
}

func (p *fakePublisher) Messages() []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.msgs...)
}

// uuids returns the event ids of messages ns as strings.
func uuids(ns ...int) []string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = eventID(n).String()
	}
	return s
}

// notifyingStore adds a Listen method to a store.
type notifyingStore struct {
	relay.Store
	listen func(ctx context.Context, notify func()) error
}

func (s *notifyingStore) Listen(ctx context.Context, notify func()) error {
	return s.listen(ctx, notify)
}

// testStore wraps a Store: it records what the relay asks of it and what it
// answers, reports each Claim on claims when that is set, and lets a test
// replace Claim or Mark. It is neither a [relay.Releaser] nor a
// [relay.Notifier], whatever it wraps.
type testStore struct {
	relay.Store
	claim  func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) // replaces Store.Claim when set
	mark   func(ctx context.Context, b relay.Batch, o relay.Outcome) error        // replaces Store.Mark when set
	claims chan int                                                               // when set, receives each Claim's message count, -1 for an error

	mu       sync.Mutex
	requests []relay.ClaimRequest
	batches  []relay.Batch
	outcomes []relay.Outcome
}

func (s *testStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	var (
		b   relay.Batch
		err error
	)
	if s.claim != nil {
		b, err = s.claim(ctx, req)
	} else {
		b, err = s.Store.Claim(ctx, req)
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	if err == nil && len(b.Messages) > 0 {
		s.batches = append(s.batches, b)
	}
	s.mu.Unlock()
	if s.claims != nil {
		n := len(b.Messages)
		if err != nil {
			n = -1
		}
		s.claims <- n
	}
	return b, err
}

func (s *testStore) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	s.mu.Lock()
	s.outcomes = append(s.outcomes, relay.Outcome{
		Published: slices.Clone(o.Published),
		Failed:    slices.Clone(o.Failed),
	})
	s.mu.Unlock()
	if s.mark != nil {
		return s.mark(ctx, b, o)
	}
	return s.Store.Mark(ctx, b, o)
}

// Requests returns the ClaimRequests so far.
func (s *testStore) Requests() []relay.ClaimRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Batches returns the non-empty batches Claim returned so far.
func (s *testStore) Batches() []relay.Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// Outcomes returns the outcomes handed to Mark so far.
func (s *testStore) Outcomes() []relay.Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.outcomes)
}

// releasingStore is a testStore that is a [relay.Releaser]: it records the
// owners it is asked to release, then calls release when that is set.
type releasingStore struct {
	*testStore
	release func(ctx context.Context, owner string) error

	mu       sync.Mutex
	released []string
}

func (s *releasingStore) Release(ctx context.Context, owner string) error {
	s.mu.Lock()
	s.released = append(s.released, owner)
	s.mu.Unlock()
	if s.release != nil {
		return s.release(ctx, owner)
	}
	return nil
}

// Released returns the owners released so far, in call order.
func (s *releasingStore) Released() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.released)
}

// errorText makes cmp compare errors by their text.
var errorText = cmp.Transformer("Error", func(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
})

// batchRecorder collects BatchResults through Config.OnBatch.
type batchRecorder struct {
	mu      sync.Mutex
	results []relay.BatchResult
	signal  chan struct{} // capacity 1: a result was added
}

func newBatchRecorder() *batchRecorder {
	return &batchRecorder{signal: make(chan struct{}, 1)}
}

func (b *batchRecorder) OnBatch(res relay.BatchResult) {
	b.mu.Lock()
	b.results = append(b.results, res)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// Results returns the results so far, with their durations, times and
// messages zeroed (see Raw).
func (b *batchRecorder) Results() []relay.BatchResult {
	out := b.Raw()
	for i := range out {
		out[i].Duration, out[i].PublishDuration, out[i].PublishedAt, out[i].Messages = 0, 0, time.Time{}, nil
	}
	return out
}

// Raw returns the results so far as the relay reported them.
func (b *batchRecorder) Raw() []relay.BatchResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]relay.BatchResult(nil), b.results...)
}

// until waits for batches until cond holds.
func (b *batchRecorder) until(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for !cond() {
		select {
		case <-b.signal:
		case <-deadline:
			t.Fatal("timed out waiting for the relay")
		}
	}
}

// untilCount waits until n batches have been recorded and returns them.
func (b *batchRecorder) untilCount(t *testing.T, n int) []relay.BatchResult {
	t.Helper()
	b.until(t, func() bool { return len(b.Results()) >= n })
	return b.Results()
}

// start runs r.Run(ctx) in a goroutine. stop cancels it and returns what Run
// returned; it also runs at cleanup.
func start(t *testing.T, ctx context.Context, r *relay.Relay) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var (
		once sync.Once
		err  error
	)
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(waitTimeout):
				err = fmt.Errorf("Run did not return within %v of cancellation", waitTimeout)
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	select {
	case <-r.Running():
	case <-time.After(waitTimeout):
		t.Fatal("relay did not start running")
	}
	return stop
}

// logBuffer collects a relay's logs for comparison.
type logBuffer struct{ runtimetest.LogBuffer }

// logger returns a logger of Warn and above writing to b without times, and
// with every backoff duration written as "*", so lines can be compared and
// still show whether the relay backed off.
func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			switch {
			case len(groups) > 0:
			case a.Key == slog.TimeKey:
				return slog.Attr{}
			case a.Key == "backoff":
				a.Value = slog.StringValue("*")
			}
			return a
		},
	}))
}

// contains fails t unless the logs contain each of lines, each as a whole line.
func (b *logBuffer) contains(t *testing.T, lines ...string) {
	t.Helper()
	logs := "\n" + b.String()
	for _, line := range lines {
		if !strings.Contains(logs, "\n"+line+"\n") {
			t.Errorf("logs do not contain the line\n\t%s\nlogs:\n%s", line, b.String())
		}
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

// callsByTopic returns calls grouped by topic, in order within each topic:
// the relay publishes a batch's topics concurrently, so only the order
// within a topic is defined.
func callsByTopic(calls []publishCall) map[string][]publishCall {
	m := make(map[string][]publishCall)
	for _, c := range calls {
		m[c.Topic] = append(m[c.Topic], c)
	}
	return m
}

// hasUUID reports whether msgs contains the message with the event id of
// message n.
func hasUUID(msgs []*message.Message, n int) bool {
	for _, m := range msgs {
		if m.UUID == eventID(n).String() {
			return true
		}
	}
	return false
}
