package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// NewStoreFunc returns an empty store for one subtest of [TestStore], and a
// function that commits msgs to it as pending messages (ignoring their ID,
// CreatedAt and Attempts) and returns the IDs they got, in order. It reports
// its own failures with t.
//
// The store must be configured with the timings of [StoreTimings], so that
// the suite can watch retries and lease expiry without long waits.
type NewStoreFunc func(t *testing.T) (store relay.Store, add func(msgs ...runtime.OutboxMessage) []int64)

// StoreTimings are the settings a store under [TestStore] must have: a
// failed message's first retry delay, its cap, the attempts that park it,
// and how long a claim stays exclusive.
var StoreTimings = struct {
	RetryDelay, MaxRetryDelay time.Duration
	MaxAttempts               int
	LeaseTTL                  time.Duration
}{RetryDelay: 200 * time.Millisecond, MaxRetryDelay: time.Second, MaxAttempts: 3, LeaseTTL: 2 * time.Second}

// waitLimit bounds every poll-until in the suite; reaching it fails the test.
const waitLimit = 20 * time.Second

// Parker is implemented by stores that can put parked messages back in the
// queue; [TestStore] checks it when the store has it.
type Parker interface {
	Unpark(ctx context.Context, ids ...int64) (int64, error)
}

// TestStore is the conformance suite of [relay.Store]: every implementation
// must pass it. Each subtest runs on a new store from newStore and checks
// one part of the contract documented on [relay.Store]: claims in ID order
// within the row and byte limits; for each aggregate a prefix of what it has
// pending; exactly the published IDs marked; a failed message delaying its
// aggregate (and only it) until its retry, with attempts counted only while
// others were published; permanent failures and too many attempts parking
// the message and holding its aggregate back; claims exclusive between
// owners; a claim's lease passing to another owner after it expires, with
// the first owner's marks then ignored; and [relay.Releaser] freeing a
// stopped owner's share at once.
func TestStore(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	ttl := StoreTimings.LeaseTTL

	t.Run("Empty", func(t *testing.T) {
		store, _ := newStore(t)
		b, err := store.Claim(ctx, req("a", 10))
		if len(b.Messages) != 0 || err != nil {
			t.Errorf("Claim() = %d messages, %v; want 0, nil", len(b.Messages), err)
		}
	})

	t.Run("OrderAndLimit", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(5, "a", "b")
		ids := add(msgs...)
		got := publishAll(t, store, "a", 3)
		if diff := cmp.Diff(msgs[:3], got, messageOpts...); diff != "" {
			t.Errorf("first claim (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(ids[:3], idsOf(got)); diff != "" {
			t.Errorf("first claim IDs (-want +got):\n%s", diff)
		}
		got = publishAll(t, store, "a", 10)
		if diff := cmp.Diff(ids[3:], idsOf(got)); diff != "" {
			t.Errorf("second claim IDs (-want +got):\n%s", diff)
		}
		if got := publishAll(t, store, "a", 10); len(got) != 0 {
			t.Errorf("third claim got IDs %v, want none: published messages are claimed again", idsOf(got))
		}
	})

	t.Run("MaxBytes", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(4, "a")
		msgs[0].Payload = []byte(`{"pad":"` + strings.Repeat("x", 100) + `"}`)
		ids := add(msgs...)
		r := req("a", 10)
		r.MaxBytes = 10 // smaller than the first message: it comes alone
		b := claim(t, store, r)
		if diff := cmp.Diff(ids[:1], idsOf(b.Messages)); diff != "" {
			t.Errorf("claim with MaxBytes below the first message (-want +got):\n%s", diff)
		}
		mark(t, store, b, nil)
		r.MaxBytes = int64(len(msgs[1].Payload) + len(msgs[2].Payload))
		b = claim(t, store, r)
		if diff := cmp.Diff(ids[1:3], idsOf(b.Messages)); diff != "" {
			t.Errorf("claim with MaxBytes of two messages (-want +got):\n%s", diff)
		}
		mark(t, store, b, nil)
	})

	t.Run("PartialFailureDelaysOnlyThatAggregate", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(4, "a")
		msgs[1].AggregateID = msgs[0].AggregateID // 0 and 1: one aggregate
		ids := add(msgs...)
		b := claim(t, store, req("a", 10))
		errBroker := errors.New("partition unavailable")
		mark(t, store, b, map[int64]error{ids[0]: errBroker, ids[1]: errBroker})
		// Right after: the failed aggregate waits, whole; nothing else is left.
		if got := publishAll(t, store, "a", 10); len(got) != 0 {
			t.Fatalf("claim right after a failure got %v; want nothing (the failed aggregate waits for its retry)", idsOf(got))
		}
		got := pollClaim(t, store, "a", 10)
		if diff := cmp.Diff(ids[:2], idsOf(got)); diff != "" {
			t.Fatalf("claim after the retry delay (-want +got):\n%s", diff)
		}
		if got[0].Attempts != 1 {
			t.Errorf("Attempts = %d after one failed attempt while others were published, want 1", got[0].Attempts)
		}
		if got[1].Attempts != 0 {
			t.Errorf("Attempts of the message behind the failed one = %d, want 0", got[1].Attempts)
		}
	})

	t.Run("NothingPublishedCountsNoAttempt", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(2, "a")...)
		b := claim(t, store, req("a", 10))
		errDown := errors.New("broker down")
		mark(t, store, b, map[int64]error{ids[0]: errDown, ids[1]: errDown})
		got := pollClaim(t, store, "a", 10)
		if diff := cmp.Diff(ids, idsOf(got)); diff != "" {
			t.Fatalf("claim after an outage (-want +got):\n%s", diff)
		}
		for _, m := range got {
			if m.Attempts != 0 {
				t.Errorf("message %d: Attempts = %d after a batch in which nothing was published, want 0 (an outage is not the message's fault)", m.ID, m.Attempts)
			}
		}
	})

	t.Run("PermanentFailureParksAndHoldsAggregate", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(3, "a")
		msgs[1].AggregateID = msgs[0].AggregateID
		ids := add(msgs...)
		b := claim(t, store, req("a", 10))
		markOutcome(t, store, b, relay.Outcome{
			Published: []int64{ids[2]},
			Failed: []relay.Failure{
				{ID: ids[0], Err: errors.New("too large"), Permanent: true},
				{ID: ids[1], Err: errors.New("behind")},
			},
		})
		// Well past the retry delay, the parked message and its aggregate's
		// later message are still not claimed.
		deadline := time.Now().Add(3 * StoreTimings.MaxRetryDelay)
		for time.Now().Before(deadline) {
			if got := publishAll(t, store, "a", 10); len(got) != 0 {
				t.Fatalf("claimed %v while message %d of the aggregate is parked; want nothing", idsOf(got), ids[0])
			}
			time.Sleep(50 * time.Millisecond) // pacing a negative check, not synchronisation
		}
		p, ok := store.(Parker)
		if !ok {
			return
		}
		if n, err := p.Unpark(ctx, ids[0]); err != nil || n != 1 {
			t.Fatalf("Unpark(%d) = %d, %v; want 1, nil", ids[0], n, err)
		}
		got := pollClaim(t, store, "a", 10)
		if diff := cmp.Diff(ids[:2], idsOf(got)); diff != "" {
			t.Errorf("claim after Unpark (-want +got), the aggregate in order:\n%s", diff)
		}
	})

	t.Run("MaxAttemptsParks", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(1, "a")...)
		for attempt := 1; attempt <= StoreTimings.MaxAttempts; attempt++ {
			// Another message in the same batch is published, so the
			// failure is the message's own.
			other := add(testMessages(1, "a")...)
			b := claim(t, store, req("a", 10))
			if diff := cmp.Diff([]int64{ids[0], other[0]}, idsOf(b.Messages)); diff != "" {
				t.Fatalf("attempt %d: claim (-want +got):\n%s", attempt, diff)
			}
			markOutcome(t, store, b, relay.Outcome{
				Published: other,
				Failed:    []relay.Failure{{ID: ids[0], Err: errors.New("rejected")}},
			})
			// The retry time is a time: wait it out.
			time.Sleep(StoreTimings.MaxRetryDelay + 100*time.Millisecond)
		}
		deadline := time.Now().Add(3 * StoreTimings.MaxRetryDelay)
		for time.Now().Before(deadline) {
			if got := publishAll(t, store, "a", 10); len(got) != 0 {
				t.Fatalf("claimed %v after %d failed attempts of message %d; want it parked", idsOf(got), StoreTimings.MaxAttempts, ids[0])
			}
			time.Sleep(50 * time.Millisecond) // pacing a negative check
		}
	})

	t.Run("ExclusiveBetweenOwners", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(4, "a")
		msgs[3].AggregateID = msgs[0].AggregateID
		ids := add(msgs[:3]...)
		held := claim(t, store, req("x", 2))
		if diff := cmp.Diff(ids[:2], idsOf(held.Messages)); diff != "" {
			t.Fatalf("first claim (-want +got):\n%s", diff)
		}
		later := add(msgs[3])[0] // same aggregate as the held ids[0]
		for range 5 {
			b := claim(t, store, req("y", 10))
			for _, m := range b.Messages {
				if m.ID == ids[0] || m.ID == ids[1] || m.ID == later {
					t.Fatalf("owner y claimed %d while owner x holds %v (and %d is behind %d)", m.ID, idsOf(held.Messages), later, ids[0])
				}
			}
			mark(t, store, b, nil)
		}
		mark(t, store, held, nil)
		var got []int64
		deadline := time.Now().Add(waitLimit)
		for !slices.Contains(got, later) && time.Now().Before(deadline) {
			for _, owner := range []string{"x", "y"} {
				got = append(got, idsOf(publishAll(t, store, owner, 10))...)
			}
		}
		if !slices.Contains(got, later) {
			t.Fatalf("message %d never claimed after the earlier one was published; got %v", later, got)
		}
	})

	t.Run("LeaseExpiresAndLateMarkIsIgnored", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(2, "a")...)
		stale := claim(t, store, req("x", 10))
		if len(stale.Messages) != 2 {
			t.Fatalf("first claim = %v, want %v", idsOf(stale.Messages), ids)
		}
		start := time.Now()
		var b relay.Batch
		for time.Now().Before(start.Add(ttl * 5)) {
			if b = claim(t, store, req("y", 10)); len(b.Messages) > 0 {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling a lease that expires by time
		}
		if diff := cmp.Diff(ids, idsOf(b.Messages)); diff != "" {
			t.Fatalf("owner y's claim after x's lease expired (-want +got):\n%s", diff)
		}
		if took := time.Since(start); took < ttl/2 {
			t.Errorf("owner y got the messages after %v, before x's lease (%v) could expire", took, ttl)
		}
		// x comes back and reports a permanent failure: ignored, since y
		// holds the messages now.
		markOutcome(t, store, stale, relay.Outcome{Failed: []relay.Failure{
			{ID: ids[0], Err: errors.New("stale"), Permanent: true},
			{ID: ids[1], Err: errors.New("stale"), Permanent: true},
		}})
		mark(t, store, b, nil)
		if got := publishAll(t, store, "y", 10); len(got) != 0 {
			t.Errorf("claimed %v after y published everything", idsOf(got))
		}
	})

	t.Run("ReleaseHandsOverAtOnce", func(t *testing.T) {
		store, add := newStore(t)
		rel, ok := store.(relay.Releaser)
		if !ok {
			t.Skip("the store does not implement relay.Releaser")
		}
		add(testMessages(1, "a")...)
		mark(t, store, claim(t, store, req("x", 10)), nil)
		if err := rel.Release(ctx, "x"); err != nil {
			t.Fatalf("Release(x) = %v", err)
		}
		ids := add(testMessages(1, "a")...)
		start := time.Now()
		got := pollClaim(t, store, "y", 10)
		if diff := cmp.Diff(ids, idsOf(got)); diff != "" {
			t.Fatalf("claim by y after x released (-want +got):\n%s", diff)
		}
		if took := time.Since(start); took >= ttl {
			t.Errorf("y got x's share after %v, not before x's lease (%v) would have expired: Release released nothing", took, ttl)
		}
	})

	t.Run("ConcurrentOwnersPublishOnceInOrder", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(120, "a", "b", "c")
		for i := range msgs {
			msgs[i].AggregateID = fmt.Sprintf("agg-%d", i%10)
		}
		ids := add(msgs...)
		var (
			mu    sync.Mutex
			count = make(map[int64]int)
			order = make(map[string][]int64)
			wg    sync.WaitGroup
		)
		for w := range 4 {
			wg.Go(func() {
				owner := fmt.Sprintf("owner-%d", w)
				deadline := time.Now().Add(waitLimit)
				for time.Now().Before(deadline) {
					mu.Lock()
					done := len(count) == len(ids)
					mu.Unlock()
					if done {
						return
					}
					// Claims run concurrently; marking and recording
					// happen together, so the recorded order is the
					// order in which messages were marked published.
					b := claim(t, store, req(owner, 7))
					mu.Lock()
					mark(t, store, b, nil)
					for _, m := range b.Messages {
						count[m.ID]++
						order[m.AggregateID] = append(order[m.AggregateID], m.ID)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		want := make(map[int64]int, len(ids))
		for _, id := range ids {
			want[id] = 1
		}
		if diff := cmp.Diff(want, count); diff != "" {
			t.Errorf("times each message was published (-want +got):\n%s", diff)
		}
		for agg, got := range order {
			if !slices.IsSorted(got) {
				t.Errorf("aggregate %s published in the order %v, want ID order", agg, got)
			}
		}
	})
}

func req(owner string, limit int) relay.ClaimRequest {
	return relay.ClaimRequest{Owner: owner, Limit: limit}
}

// claim claims and fails t on an error.
func claim(t *testing.T, store relay.Store, r relay.ClaimRequest) relay.Batch {
	t.Helper()
	b, err := store.Claim(context.Background(), r)
	if err != nil {
		t.Fatalf("Claim(%+v) = %v", r, err)
	}
	return b
}

// mark marks b: the messages in failed as failed with their error (and the
// rest of their aggregate behind them), the others as published.
func mark(t *testing.T, store relay.Store, b relay.Batch, failed map[int64]error) {
	t.Helper()
	if len(b.Messages) == 0 {
		return
	}
	var out relay.Outcome
	for _, m := range b.Messages {
		if err, ok := failed[m.ID]; ok {
			out.Failed = append(out.Failed, relay.Failure{ID: m.ID, Err: err})
		} else {
			out.Published = append(out.Published, m.ID)
		}
	}
	markOutcome(t, store, b, out)
}

func markOutcome(t *testing.T, store relay.Store, b relay.Batch, out relay.Outcome) {
	t.Helper()
	if err := store.Mark(context.Background(), b, out); err != nil {
		t.Fatalf("Mark() = %v", err)
	}
}

// publishAll claims up to limit messages for owner, marks all of them
// published, and returns them.
func publishAll(t *testing.T, store relay.Store, owner string, limit int) []runtime.OutboxMessage {
	t.Helper()
	b := claim(t, store, req(owner, limit))
	mark(t, store, b, nil)
	return b.Messages
}

// pollClaim publishes what owner can claim, polling until it gets something
// or waitLimit passes.
func pollClaim(t *testing.T, store relay.Store, owner string, limit int) []runtime.OutboxMessage {
	t.Helper()
	b := pollClaimBatch(t, store, owner, limit)
	mark(t, store, b, nil)
	return b.Messages
}

// pollClaimBatch claims for owner, polling until it gets something or
// waitLimit passes; it does not mark.
func pollClaimBatch(t *testing.T, store relay.Store, owner string, limit int) relay.Batch {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		b := claim(t, store, req(owner, limit))
		if len(b.Messages) > 0 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing claimable by %s within %v", owner, waitLimit)
		}
		time.Sleep(20 * time.Millisecond) // polling for a retry time to pass
	}
}

// messageOpts compares claimed messages with the messages added: the
// store-assigned fields are ignored and payloads compare as JSON values.
var messageOpts = cmp.Options{
	cmpopts.IgnoreFields(runtime.OutboxMessage{}, "ID", "CreatedAt", "Attempts"),
	cmpopts.EquateEmpty(),
	cmp.Transformer("JSON", func(raw json.RawMessage) any {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return string(raw)
		}
		return v
	}),
}

func idsOf(msgs []runtime.OutboxMessage) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// testMessages returns n messages of distinct aggregates, spread over topics.
func testMessages(n int, topics ...string) []runtime.OutboxMessage {
	msgs := make([]runtime.OutboxMessage, n)
	for i := range msgs {
		id := uuid.Must(uuid.NewV7())
		msgs[i] = runtime.OutboxMessage{
			Topic: topics[i%len(topics)],
			Envelope: runtime.Envelope{
				EventID:       id,
				EventType:     "runtimetest.thing_happened",
				EventVersion:  1,
				AggregateType: "thing",
				AggregateID:   id.String(),
				OccurredAt:    runtime.OccurredAt(time.Now()),
				Headers:       map[string]string{runtime.MetadataCorrelationID: fmt.Sprintf("corr-%d", i)},
				Payload:       fmt.Appendf(nil, `{"n":%d,"event_version":1}`, i),
			},
		}
	}
	return msgs
}
