package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

// aheadStore is a [relay.InFlightExcluder] that, like sqlstore.Store, may
// return later messages of an aggregate whose earlier message is in flight:
// a claim returns the first pending messages in ID order, leaving out
// only req.InFlight. A failed message stays pending with no retry delay.
type aheadStore struct {
	mu       sync.Mutex
	msgs     []runtime.OutboxMessage
	done     map[int64]bool
	requests []relay.ClaimRequest
	failMark int // Mark calls still to fail
	// lease, when set, is the time to each batch's Deadline from its
	// claim, made at claimed[i] for requests[i].
	lease   time.Duration
	claimed []time.Time
	// onMark, when set, is called at the start of every Mark, outside
	// the store's lock.
	onMark func(ctx context.Context, b relay.Batch) error
	// visible, when not zero, is how many of msgs have committed: a
	// claim sees only msgs[:visible] (see commitAll).
	visible int
}

// commitAll makes every message of s visible to claims, as if their
// transactions committed now.
func (s *aheadStore) commitAll() { s.commit(0) }

// commit makes msgs[:n] visible to claims (all of them when n is 0).
func (s *aheadStore) commit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.visible = n
}

func (s *aheadStore) ExcludesInFlight() {}

func (s *aheadStore) Claim(_ context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	now := time.Now()
	s.claimed = append(s.claimed, now)
	var b relay.Batch
	if s.lease > 0 {
		b.Deadline = now.Add(s.lease)
	}
	msgs := s.msgs
	if s.visible > 0 {
		msgs = msgs[:s.visible]
	}
	for _, m := range msgs {
		if len(b.Messages) == req.Limit {
			break
		}
		if !s.done[m.ID] && !slices.Contains(req.InFlight, m.ID) {
			b.Messages = append(b.Messages, m)
		}
	}
	return b, nil
}

func (s *aheadStore) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	if s.onMark != nil {
		if err := s.onMark(ctx, b); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failMark > 0 {
		s.failMark--
		return errors.New("database unavailable")
	}
	for _, id := range o.Published {
		s.done[id] = true
	}
	return nil
}

func (s *aheadStore) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs) - len(s.done)
}

func (s *aheadStore) Requests() []relay.ClaimRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// aggMessages returns messages 1..n, message i of aggregate aggs[i-1] and
// on the topic of the same name, with IDs 1..n.
func aggMessages(aggs ...string) []runtime.OutboxMessage {
	msgs := make([]runtime.OutboxMessage, len(aggs))
	for i, a := range aggs {
		m := newMessage(i+1, a)
		m.ID = int64(i + 1)
		m.AggregateID = a
		msgs[i] = m
	}
	return msgs
}

// published returns, per topic, the UUIDs of the messages the publisher
// accepted, in the order it accepted them.
func published(pub *fakePublisher) map[string][]string {
	out := map[string][]string{}
	for _, c := range pub.Calls() {
		if !c.Err {
			out[c.Topic] = append(out[c.Topic], c.UUIDs...)
		}
	}
	return out
}

func TestClaimAheadHoldsBackAggregateThatFailed(t *testing.T) {
	// Batch 1 is x1, y1; the claim ahead, made while batch 1 is marked,
	// returns x2, y2. x1 fails, so x2 must wait for it.
	holdsBackFailedAggregate(t, 2, 0)
}

// holdsBackFailedAggregate runs a relay with batchSize over x1, y1, x2, y2,
// the first visible of them committed (all when 0) and the rest committing
// at the first publish, x1 failing once: x2 must go out after x1, and the
// claim after batch 1 (x1, y1) must leave it out.
func holdsBackFailedAggregate(t *testing.T, batchSize, visible int) {
	t.Helper()
	store := &aheadStore{msgs: aggMessages("x", "y", "x", "y"), done: map[int64]bool{}, visible: visible}
	var xCalls int
	var mu sync.Mutex
	var commit sync.Once
	pub := &fakePublisher{fn: func(topic string, _ []*message.Message) error {
		commit.Do(store.commitAll)
		mu.Lock()
		defer mu.Unlock()
		if topic == "x" {
			xCalls++
			if xCalls == 1 {
				return errors.New("partition leader moved")
			}
		}
		return nil
	}}
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: batchSize, PollInterval: never, ActivePollInterval: 1, MinBackoff: 1, MaxBackoff: 1, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return store.pending() == 0 })

	want := map[string][]string{"x": uuids(1, 3), "y": uuids(2, 4)}
	if diff := cmp.Diff(want, published(pub)); diff != "" {
		t.Errorf("accepted messages by topic (-want +got):\n%s", diff)
	}
	if reqs := store.Requests(); len(reqs) < 2 || !slices.Equal(reqs[1].InFlight, []int64{1, 2}) {
		t.Errorf("first claim requests %+v: want the second to leave out the in-flight batch [1 2]", reqs[:min(2, len(reqs))])
	}
}

func TestBatchAfterAFailedMarkIsPublishedAgainAfterIt(t *testing.T) {
	// Batch 1 (a1, b1) is published and marked in the background while
	// batch 2 (a2, b2), claimed ahead, is published; the mark fails, so
	// a1 and b1 are published again, and batch 2 is left unmarked so that
	// a2 and b2 go out again after them: each aggregate's log replays a
	// suffix (a1 a2 a1 a2), never ends on an earlier event (a1 a2 a1).
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}, failMark: 1}
	pub := &fakePublisher{}
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: 2, PollInterval: never, ActivePollInterval: 1, MinBackoff: 1, MaxBackoff: 1, OnBatch: batches.OnBatch, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return store.pending() == 0 })

	want := map[string][]string{"a": uuids(1, 3, 1, 3), "b": uuids(2, 4, 2, 4)}
	if diff := cmp.Diff(want, published(pub)); diff != "" {
		t.Errorf("accepted messages by topic (-want +got):\n%s", diff)
	}
}

func TestClaimAgainInShortensTheWait(t *testing.T) {
	// The store has no share for the relay yet, and says when to look
	// again: the relay must not wait for its (hour-long) poll interval.
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "a"))
	var mu sync.Mutex
	hinted := 0
	store := &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
		mu.Lock()
		defer mu.Unlock()
		if hinted < 3 {
			hinted++
			return relay.Batch{ClaimAgainIn: time.Millisecond}, nil
		}
		return mem.Claim(ctx, req)
	}}
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: never, ActivePeriod: time.Nanosecond, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })
}

// holdFirstPublish returns a publisher that accepts every call, holding the
// first until ready reports true (polled every millisecond, for at most
// 10 s), and the store's messages all on topic "t", so that a batch goes
// out in one call.
func holdFirstPublish(store *aheadStore, ready func() bool) *fakePublisher {
	for i := range store.msgs {
		store.msgs[i].Topic = "t"
	}
	var once sync.Once
	return &fakePublisher{fn: func(string, []*message.Message) error {
		once.Do(func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !ready(); {
				time.Sleep(time.Millisecond)
			}
		})
		return nil
	}}
}

// drainAhead runs a relay with batches of 2 over store until nothing is
// pending, and checks that pub accepted messages 1 to 4 in order.
func drainAhead(t *testing.T, store *aheadStore, pub *fakePublisher) {
	t.Helper()
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: 2, PollInterval: never, ActivePollInterval: 1, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return store.pending() == 0 })
	want := map[string][]string{"t": uuids(1, 2, 3, 4)}
	if diff := cmp.Diff(want, published(pub)); diff != "" {
		t.Errorf("accepted messages by topic (-want +got):\n%s", diff)
	}
}

func TestClaimAheadRunsWhilePublishing(t *testing.T) {
	// The claim of batch 2 must not wait for batch 1's publish: the
	// publisher holds batch 1 until the store has been asked for batch 2
	// (leaving batch 1 out), or gives up after a deadline.
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}}
	var sawAhead atomic.Bool
	pub := holdFirstPublish(store, func() bool {
		reqs := store.Requests()
		sawAhead.Store(len(reqs) >= 2 && slices.Equal(reqs[1].InFlight, []int64{1, 2}))
		return len(reqs) >= 2
	})
	drainAhead(t, store, pub)
	if !sawAhead.Load() {
		t.Errorf("claim requests %+v: want the claim of the next batch, leaving out [1 2], made while batch 1 was being published", store.Requests())
	}
}

func TestClaimAheadDroppedAfterASlowPublish(t *testing.T) {
	// Batch 1's publish takes more than half of the lease the batch
	// claimed ahead had at its claim (a slow broker): the relay claims
	// afresh rather than publish that batch against a deadline the store
	// has since extended.
	const lease = 400 * time.Millisecond
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}, lease: lease}
	pub := holdFirstPublish(store, func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.claimed) >= 2 && time.Since(store.claimed[1]) > lease*3/4
	})
	drainAhead(t, store, pub)
	reqs := store.Requests()
	if len(reqs) < 3 || !slices.Equal(reqs[1].InFlight, []int64{1, 2}) || len(reqs[2].InFlight) != 0 {
		t.Errorf("claim requests %+v: want the claim ahead (leaving out [1 2]) dropped and a fresh claim after it", reqs)
	}
}

func TestMarkRunsWhileTheNextBatchIsPublished(t *testing.T) {
	// Batch 1's mark waits for batch 2's publish to start (or gives up
	// after a deadline): a relay that marked before it published the next
	// batch would give up, and the test fails. OnBatch still reports the
	// batches in order, batch 1 with its mark done.
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}}
	pub, overlapped := markBesideBatch2(store)
	drainAhead(t, store, pub)
	if !overlapped.Load() {
		t.Error("batch 1 was marked before batch 2's publish started: want the mark beside the publish")
	}
}

// markBesideBatch2 puts store's messages on topic "t" and returns a
// publisher that commits all of them at its first call, and whether the
// mark of the batch that starts with message 1 saw the publish of message 3
// start: that mark waits for it, for at most 5 s.
func markBesideBatch2(store *aheadStore) (*fakePublisher, *atomic.Bool) {
	for i := range store.msgs {
		store.msgs[i].Topic = "t" // as drainAhead wants
	}
	second := make(chan struct{})
	var commit, secondOnce sync.Once
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		commit.Do(store.commitAll)
		for _, m := range msgs {
			if m.UUID == uuids(3)[0] {
				secondOnce.Do(func() { close(second) })
			}
		}
		return nil
	}}
	overlapped := new(atomic.Bool)
	store.onMark = func(_ context.Context, b relay.Batch) error {
		if b.Messages[0].ID == 1 {
			select {
			case <-second:
				overlapped.Store(true)
			case <-time.After(5 * time.Second):
			}
		}
		return nil
	}
	return pub, overlapped
}

func TestStreamClaimsAfterPublishAndMarksBeside(t *testing.T) {
	// A batch that did not fill (2 messages of 10, fewer than
	// CoalesceRows): messages 3 and 4 commit while it is published. The
	// relay claims them as soon as the batch is published, leaving the
	// batch out, and marks it while they are published: batch 1's mark
	// waits for batch 2's publish to start (or gives up after a
	// deadline), so a relay that marked before it claimed again gives up,
	// and the test fails.
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}, visible: 2}
	pub, overlapped := markBesideBatch2(store)
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: 10, PollInterval: never, ActivePollInterval: 1, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return store.pending() == 0 })
	if diff := cmp.Diff(map[string][]string{"t": uuids(1, 2, 3, 4)}, published(pub)); diff != "" {
		t.Errorf("accepted messages by topic (-want +got):\n%s", diff)
	}
	if !overlapped.Load() {
		t.Error("batch 1 was marked before batch 2's publish started: want the claim right after the publish and the mark beside the next publish")
	}
	if reqs := store.Requests(); len(reqs) < 2 || !slices.Equal(reqs[1].InFlight, []int64{1, 2}) {
		t.Errorf("first claim requests %+v: want the second to leave out the unmarked batch [1 2]", reqs[:min(2, len(reqs))])
	}
}

func TestFastStreamMarksInLine(t *testing.T) {
	// A stream faster than CoalesceRows (8) messages per two
	// ActivePollIntervals (10 s here, so any stream is): after the first
	// batch (1, 2), claimed with no claim before it to measure the stream
	// by, the relay claims right after the publish (3, 4), and from then
	// on marks each batch before it claims again, so that the stream's
	// batches grow to be gathered instead of being claimed a few messages
	// at a time. No claim may leave out batch 2 (3, 4).
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b", "a", "b"), done: map[int64]bool{}, visible: 2}
	for i := range store.msgs {
		store.msgs[i].Topic = "t"
	}
	pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
		switch msgs[0].UUID {
		case uuids(1)[0]:
			store.commit(4)
		case uuids(3)[0]:
			store.commitAll()
		}
		return nil
	}}
	batches := newBatchRecorder()
	r, err := relay.New(store, pub, relay.Config{BatchSize: 10, PollInterval: never, ActivePollInterval: 10 * time.Second, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return store.pending() == 0 })
	if diff := cmp.Diff(map[string][]string{"t": uuids(1, 2, 3, 4, 5, 6)}, published(pub)); diff != "" {
		t.Errorf("accepted messages by topic (-want +got):\n%s", diff)
	}
	reqs := store.Requests()
	if len(reqs) < 2 || !slices.Equal(reqs[1].InFlight, []int64{1, 2}) {
		t.Errorf("first claim requests %+v: want the second, after the first batch, to leave it out", reqs[:min(2, len(reqs))])
	}
	for _, req := range reqs {
		if slices.Contains(req.InFlight, 3) {
			t.Errorf("claim requests %+v: want none leaving out batch 2 (a fast stream's batch is marked before the next claim)", reqs)
			break
		}
	}
}

func TestStreamClaimAfterPublishHoldsBackAggregateThatFailed(t *testing.T) {
	// As TestClaimAheadHoldsBackAggregateThatFailed, for a batch that did
	// not fill: x2 and y2 commit while batch 1 (x1, y1) is published, and
	// the claim right after it returns them; x1 failed, so x2 must wait
	// for it, while y2 goes out.
	holdsBackFailedAggregate(t, 10, 2)
}

func TestOnBatchReportsBackgroundMarksInOrder(t *testing.T) {
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b", "a", "b", "c"), done: map[int64]bool{}}
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{BatchSize: 2, PollInterval: never, ActivePollInterval: 1, OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return store.pending() == 0 && len(batches.Raw()) >= 4 })
	var got [][]int64
	for _, res := range batches.Raw() {
		if res.Err != nil {
			t.Errorf("batch %v: %v", res.Messages, res.Err)
		}
		var ids []int64
		for _, m := range res.Messages {
			ids = append(ids, m.ID)
		}
		got = append(got, ids)
	}
	if diff := cmp.Diff([][]int64{{1, 2}, {3, 4}, {5, 6}, {7}}, got); diff != "" {
		t.Errorf("batches reported (-want +got):\n%s", diff)
	}
}

func TestRunWaitsForTheLastMark(t *testing.T) {
	// The relay is stopped while batch 1 is published, with batch 2
	// claimed ahead: batch 1 is marked in the background, and Run returns
	// only once that mark has ended (here cut by ShutdownTimeout).
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}}
	publishing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pub := &fakePublisher{fn: func(string, []*message.Message) error {
		once.Do(func() {
			close(publishing)
			<-release
		})
		return nil
	}}
	var markEnded atomic.Bool
	store.onMark = func(ctx context.Context, b relay.Batch) error {
		<-ctx.Done() // a database that does not answer
		markEnded.Store(true)
		return ctx.Err()
	}
	r, err := relay.New(store, pub, relay.Config{BatchSize: 2, PollInterval: never, ShutdownTimeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-publishing:
	case <-time.After(waitTimeout):
		t.Fatal("the relay published nothing")
	}
	// Wait for the claim ahead, so that batch 1 is marked in the
	// background, then stop the relay and let the publish end.
	for deadline := time.Now().Add(waitTimeout); len(store.Requests()) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("no claim ahead")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(release)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return")
	}
	if !markEnded.Load() {
		t.Error("Run returned while batch 1's mark was still running")
	}
}

func TestNoProgressWhileEveryMarkFails(t *testing.T) {
	// Claims work and publishes go out, but the store refuses every mark:
	// a batch marked in the background counts as progress only once its
	// mark has succeeded, so health checks see a relay that never gets a
	// batch done (it used to count each fresh batch before its mark
	// failed).
	store := &aheadStore{msgs: aggMessages("a", "b", "a", "b"), done: map[int64]bool{}, failMark: 1 << 30}
	var marks atomic.Int32
	store.onMark = func(context.Context, relay.Batch) error {
		marks.Add(1)
		return nil
	}
	batches := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{BatchSize: 2, PollInterval: never, MinBackoff: 1, MaxBackoff: 1, OnBatch: batches.OnBatch, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.until(t, func() bool { return marks.Load() >= 6 })
	if p := r.LastProgress(); !p.IsZero() {
		t.Errorf("LastProgress = %v after %d failed marks and no successful one; want the zero time", p, marks.Load())
	}
}
