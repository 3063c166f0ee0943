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
// queue (sqlstore.Store, [MemoryStore]); [TestStore] checks it when the store
// has it. Unpark resets the messages' attempts and returns how many of ids
// were parked; it leaves other messages alone.
type Parker interface {
	Unpark(ctx context.Context, ids ...int64) (int64, error)
}

// Discarder is implemented by stores that can delete parked messages for
// good (sqlstore.Store, [MemoryStore]); [TestStore] checks it when the store
// has it. Discard returns how many of ids were parked and deleted; it
// leaves other messages alone.
type Discarder interface {
	Discard(ctx context.Context, ids ...int64) (int64, error)
}

// StatsReader is implemented by stores that report their state for
// monitoring (sqlstore.Store, [MemoryStore]); [TestStore] checks it when the
// store has it.
type StatsReader interface {
	Stats(ctx context.Context) (relay.Stats, error)
}

// Retainer is implemented by stores that delete published messages after a
// retention period (sqlstore.Store, [MemoryStore]); [TestStore] checks it when
// the store has it. DeletePublished deletes the messages published more
// than olderThan ago, at most batch per statement, and returns how many it
// deleted; it never deletes a pending or parked message.
type Retainer interface {
	DeletePublished(ctx context.Context, olderThan time.Duration, batch int) (int64, error)
}

// TestStore is the conformance suite of [relay.Store]: every implementation
// must pass it. Each subtest runs on a new store from newStore and checks
// one part of the contract documented on [relay.Store]: claims in ID order
// within the row and byte limits; for each aggregate a prefix of what it has
// pending; exactly the published IDs marked; a failed message delaying its
// aggregate (and only it) until its retry, not claimed before its retry
// delay (doubling per counted attempt) and claimed after it, with attempts
// counted only while others were published and never for a failure marked
// [relay.Failure.Transient]; a failure marked [relay.Failure.Lost]
// released at once, with no attempt; permanent failures and too
// many attempts parking the message and holding its aggregate back while
// other aggregates flow; claims exclusive between owners; a claim's lease
// passing to another owner after it expires, with the first owner's marks
// then ignored; and [relay.Releaser] freeing a stopped owner's share at
// once.
//
// The operator's side is checked on stores that implement it: [Parker]
// (an unparked message is published before its aggregate's later ones, in
// order), [Discarder] (a discarded message is gone and its aggregate goes
// on), [StatsReader] (pending, retrying, parked and the oldest pending
// age follow the messages' state) and [Retainer] (retention deletes only
// published messages older than the cutoff). A subtest whose interface the
// store lacks is skipped.
//
// The cases run in parallel (t.Parallel), each with the store newStore
// returns for it: newStore must return stores that share nothing (a fresh
// database or schema each).
func TestStore(t *testing.T, newStore NewStoreFunc) {
	ctx := context.Background()
	ttl := StoreTimings.LeaseTTL

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		store, _ := newStore(t)
		b, err := store.Claim(ctx, req("a", 10))
		if len(b.Messages) != 0 || err != nil {
			t.Errorf("Claim() = %d messages, %v; want 0, nil", len(b.Messages), err)
		}
	})

	t.Run("OrderAndLimit", func(t *testing.T) {
		t.Parallel()
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
		t.Parallel()
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
		t.Parallel()
		store, add := newStore(t)
		msgs := testMessages(4, "a")
		msgs[1].AggregateID = msgs[0].AggregateID // 0 and 1: one aggregate
		ids := add(msgs...)
		b := claim(t, store, req("a", 10))
		errBroker := errors.New("partition unavailable")
		before := time.Now() // the retry time is at least RetryDelay after this
		mark(t, store, b, map[int64]error{ids[0]: errBroker, ids[1]: errBroker})
		// Right after: the failed aggregate waits, whole; nothing else is
		// left. Only a claim sooner than RetryDelay proves it (a loaded
		// machine may come later, when the aggregate is due again).
		got := publishAll(t, store, "a", 10)
		if len(got) != 0 && time.Since(before) < StoreTimings.RetryDelay {
			t.Fatalf("claim %v after a failure got %v; want nothing (the failed aggregate waits for its retry)", time.Since(before), idsOf(got))
		}
		if len(got) == 0 { // not due yet: wait for it
			got = pollClaim(t, store, "a", 10)
		}
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
		t.Parallel()
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

	t.Run("TransientFailureCountsNoAttempt", func(t *testing.T) {
		t.Parallel()
		// A failure the publisher classed as the broker's (a partition
		// without a leader) while other messages were published, more
		// times than MaxAttempts: delayed each time, never parked, no
		// attempt counted.
		store, add := newStore(t)
		id := add(testMessages(1, "a")...)[0]
		errLeader := runtime.Transient(errors.New("NOT_LEADER_FOR_PARTITION"))
		deadline := time.Now().Add(waitLimit)
		for failures := 0; failures < StoreTimings.MaxAttempts+2; {
			add(testMessages(1, "a")...) // something else, published beside it
			b := claim(t, store, req("a", 10))
			if !slices.ContainsFunc(b.Messages, func(m runtime.OutboxMessage) bool { return m.ID == id }) {
				mark(t, store, b, nil) // it waits for its retry time, or is parked
				if time.Now().After(deadline) {
					t.Fatalf("message %d not claimed again within %v after %d transient failures: parked?", id, waitLimit, failures)
				}
				time.Sleep(20 * time.Millisecond) // polling for a retry time to pass
				continue
			}
			if a := b.Messages[0].Attempts; a != 0 {
				t.Fatalf("after %d transient failures: Attempts = %d, want 0", failures, a)
			}
			out := relay.Outcome{Failed: []relay.Failure{{ID: id, Err: errLeader, Transient: true}}, Published: idsOf(b.Messages[1:])}
			before := time.Now() // the retry time is at least RetryDelay after this
			markOutcome(t, store, b, out)
			failures++
			// Delayed: a claim right after leaves it out. On a loaded
			// machine "right after" may come after RetryDelay, when the
			// message is due again: only a claim sooner proves it was not
			// delayed.
			b = claim(t, store, req("a", 10))
			if slices.Contains(idsOf(b.Messages), id) {
				if time.Since(before) < StoreTimings.RetryDelay {
					t.Fatalf("message %d claimed again %v after a transient failure; want its retry delayed by %v", id, time.Since(before), StoreTimings.RetryDelay)
				}
				// Due again already: fail it again, as the loop does
				// (marking the batch published would publish it).
				if a := b.Messages[0].Attempts; a != 0 {
					t.Fatalf("after %d transient failures: Attempts = %d, want 0", failures, a)
				}
				markOutcome(t, store, b, relay.Outcome{Failed: []relay.Failure{{ID: id, Err: errLeader, Transient: true}}, Published: idsOf(b.Messages[1:])})
				failures++
				continue
			}
			mark(t, store, b, nil)
		}
		if sr, ok := store.(StatsReader); ok {
			st, err := sr.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Parked != 0 || st.Retrying != 0 {
				t.Errorf("Stats() = %+v after transient failures only; want nothing parked or retrying", st)
			}
		}
		got := pollClaim(t, store, "a", 10)
		if !slices.Contains(idsOf(got), id) {
			t.Fatalf("claim after the transient failures = %v, want message %d", idsOf(got), id)
		}
	})

	t.Run("LostFailureIsReleasedAsItWas", func(t *testing.T) {
		t.Parallel()
		// A publish the lease's loss cut short (relay.Failure.Lost): the
		// message is claimable again at once, with no attempt counted
		// and nothing recorded as retrying, though it is marked
		// Transient too.
		store, add := newStore(t)
		ids := add(testMessages(2, "a")...)
		b := claim(t, store, req("a", 10))
		before := time.Now()
		markOutcome(t, store, b, relay.Outcome{Published: ids[:1],
			Failed: []relay.Failure{{ID: ids[1], Err: errors.New("relay: lease lost"), Transient: true, Lost: true}}})
		if sr, ok := store.(StatsReader); ok {
			st, err := sr.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Retrying != 0 || st.Parked != 0 || st.Pending != 1 {
				t.Errorf("Stats() = %+v after a Lost failure; want 1 pending, nothing retrying or parked", st)
			}
		}
		got := claim(t, store, req("a", 10)).Messages
		if len(got) != 1 || got[0].ID != ids[1] {
			if time.Since(before) < StoreTimings.RetryDelay {
				t.Fatalf("claim right after a Lost failure = %v, want message %d at once (not delayed)", idsOf(got), ids[1])
			}
			t.Logf("the claim came %v after the mark, past RetryDelay: it cannot tell a delay from none", time.Since(before))
			return
		}
		if got[0].Attempts != 0 {
			t.Errorf("Attempts = %d after a Lost failure, want 0", got[0].Attempts)
		}
	})

	t.Run("RetryDelay", func(t *testing.T) {
		t.Parallel()
		store, add := newStore(t)
		ids := add(testMessages(2, "a")...)
		b := claim(t, store, req("a", 10))
		// The message's own failure (another one was published): attempt 1
		// waits RetryDelay, attempt 2 twice that (capped at MaxRetryDelay).
		for attempt := 1; attempt <= 2; attempt++ {
			delay := min(StoreTimings.RetryDelay<<(attempt-1), StoreTimings.MaxRetryDelay)
			failedAt := time.Now() // before Mark: the retry time is later
			markOutcome(t, store, b, relay.Outcome{
				Published: idsOf(b.Messages[1:]),
				Failed:    []relay.Failure{{ID: ids[0], Err: errors.New("rejected")}},
			})
			deadline := time.Now().Add(waitLimit)
			for {
				// A message of another aggregate in every claim: when the
				// failed one comes back, one is published beside it.
				add(testMessages(1, "a")...)
				b = claim(t, store, req("a", 10))
				claimedBy := time.Now() // the claim ran before this
				if len(b.Messages) > 0 && b.Messages[0].ID == ids[0] {
					if early := failedAt.Add(delay); claimedBy.Before(early) {
						t.Fatalf("attempt %d: message %d claimed again %v after its failure; want not before its retry delay %v",
							attempt, ids[0], claimedBy.Sub(failedAt), delay)
					}
					if b.Messages[0].Attempts != attempt {
						t.Errorf("attempt %d: Attempts = %d, want %d", attempt, b.Messages[0].Attempts, attempt)
					}
					if len(b.Messages) < 2 {
						t.Fatalf("attempt %d: claim = %v, want the retried message and the one added", attempt, idsOf(b.Messages))
					}
					break
				}
				mark(t, store, b, nil) // the other aggregates go on meanwhile
				if time.Now().After(deadline) {
					t.Fatalf("attempt %d: message %d not claimed again within %v of its failure", attempt, ids[0], waitLimit)
				}
				time.Sleep(10 * time.Millisecond) // polling for a retry time to pass
			}
		}
		mark(t, store, b, nil)
	})

	for _, permanent := range []bool{true, false} {
		name := "MaxAttemptsParks"
		if permanent {
			name = "PermanentFailureParksAndHoldsAggregate"
		}
		t.Run(name, func(t *testing.T) {
			store, add := newStore(t)
			parkedID, agg := park(t, store, add, permanent)
			// The parked aggregate's later message waits behind it; another
			// aggregate's message goes out.
			msgs := testMessages(2, "a")
			msgs[0].AggregateID = agg
			ids := add(msgs...)
			behind, other := ids[0], ids[1]
			held := func(got []runtime.OutboxMessage) {
				t.Helper()
				for _, m := range got {
					if m.ID == parkedID || m.ID == behind {
						t.Fatalf("claimed %d while message %d of its aggregate is parked; want it held back", m.ID, parkedID)
					}
				}
			}
			var got []int64
			deadline := time.Now().Add(waitLimit)
			for !slices.Contains(got, other) {
				b := publishAll(t, store, "a", 10)
				held(b)
				got = append(got, idsOf(b)...)
				if time.Now().After(deadline) {
					t.Fatalf("message %d of another aggregate not claimed within %v while %d is parked", other, waitLimit, parkedID)
				}
				time.Sleep(10 * time.Millisecond) // pacing the claims
			}
			// Well past any retry delay, the parked aggregate still waits.
			until := time.Now().Add(2 * StoreTimings.MaxRetryDelay)
			for time.Now().Before(until) {
				held(publishAll(t, store, "a", 10))
				time.Sleep(50 * time.Millisecond) // pacing a negative check, not synchronisation
			}
		})
	}

	t.Run("UnparkPublishesInOrder", func(t *testing.T) {
		t.Parallel()
		store, add := newStore(t)
		p, ok := store.(Parker)
		if !ok {
			t.Skip("the store does not implement runtimetest.Parker")
		}
		msgs := testMessages(4, "a")
		for i := 1; i < 3; i++ {
			msgs[i].AggregateID = msgs[0].AggregateID // 0, 1, 2: one aggregate
		}
		ids := add(msgs...)
		b := claim(t, store, req("a", 10))
		markOutcome(t, store, b, relay.Outcome{
			Published: ids[3:],
			Failed: []relay.Failure{
				{ID: ids[0], Err: errors.New("too large"), Permanent: true},
				{ID: ids[1], Err: errors.New("behind")},
				{ID: ids[2], Err: errors.New("behind")},
			},
		})
		if n, err := p.Unpark(ctx, ids[1], ids[3]); err != nil || n != 0 {
			t.Errorf("Unpark(%d waiting behind, %d published) = %d, %v; want 0, nil", ids[1], ids[3], n, err)
		}
		if n, err := p.Unpark(ctx, ids[0]); err != nil || n != 1 {
			t.Fatalf("Unpark(%d) = %d, %v; want 1, nil", ids[0], n, err)
		}
		// Two messages at a time: the unparked one first, then the rest
		// of its aggregate, in order.
		first := pollClaim(t, store, "a", 2)
		if diff := cmp.Diff(ids[:2], idsOf(first)); diff != "" {
			t.Fatalf("first claim after Unpark (-want +got):\n%s", diff)
		}
		if first[0].Attempts != 0 {
			t.Errorf("Attempts of the unparked message = %d, want 0 (reset)", first[0].Attempts)
		}
		second := pollClaim(t, store, "a", 2)
		if diff := cmp.Diff(ids[2:3], idsOf(second)); diff != "" {
			t.Errorf("second claim after Unpark (-want +got):\n%s", diff)
		}
		if n, err := p.Unpark(ctx, ids[0]); err != nil || n != 0 {
			t.Errorf("Unpark(%d) once published = %d, %v; want 0, nil", ids[0], n, err)
		}
	})

	t.Run("DiscardLetsAggregateGoOn", func(t *testing.T) {
		t.Parallel()
		store, add := newStore(t)
		d, ok := store.(Discarder)
		if !ok {
			t.Skip("the store does not implement runtimetest.Discarder")
		}
		msgs := testMessages(3, "a")
		msgs[1].AggregateID = msgs[0].AggregateID
		ids := add(msgs...)
		b := claim(t, store, req("a", 10))
		markOutcome(t, store, b, relay.Outcome{
			Published: ids[2:],
			Failed: []relay.Failure{
				{ID: ids[0], Err: errors.New("too large"), Permanent: true},
				{ID: ids[1], Err: errors.New("behind")},
			},
		})
		if n, err := d.Discard(ctx, ids[1], ids[2]); err != nil || n != 0 {
			t.Errorf("Discard(%d waiting behind, %d published) = %d, %v; want 0, nil", ids[1], ids[2], n, err)
		}
		if n, err := d.Discard(ctx, ids[0]); err != nil || n != 1 {
			t.Fatalf("Discard(%d) = %d, %v; want 1, nil", ids[0], n, err)
		}
		got := pollClaim(t, store, "a", 10)
		if diff := cmp.Diff(ids[1:2], idsOf(got)); diff != "" {
			t.Errorf("claim after Discard (-want +got), the discarded message gone:\n%s", diff)
		}
		if n, err := d.Discard(ctx, ids[0]); err != nil || n != 0 {
			t.Errorf("second Discard(%d) = %d, %v; want 0, nil", ids[0], n, err)
		}
		if p, ok := store.(Parker); ok {
			if n, err := p.Unpark(ctx, ids[0]); err != nil || n != 0 {
				t.Errorf("Unpark(%d) after Discard = %d, %v; want 0, nil", ids[0], n, err)
			}
		}
		if got := publishAll(t, store, "a", 10); len(got) != 0 {
			t.Errorf("claimed %v after everything was published or discarded", idsOf(got))
		}
	})

	t.Run("Stats", func(t *testing.T) {
		t.Parallel()
		store, add := newStore(t)
		sr, ok := store.(StatsReader)
		if !ok {
			t.Skip("the store does not implement runtimetest.StatsReader")
		}
		stats := func() relay.Stats {
			t.Helper()
			st, err := sr.Stats(ctx)
			if err != nil {
				t.Fatalf("Stats() = %v", err)
			}
			return st
		}
		if st := stats(); st != (relay.Stats{}) {
			t.Errorf("Stats() of an empty store = %+v, want zero", st)
		}
		before := time.Now()
		ids := add(testMessages(3, "a")...) // published, retrying, parked
		b := claim(t, store, req("a", 10))
		markOutcome(t, store, b, relay.Outcome{
			Published: ids[:1],
			Failed: []relay.Failure{
				{ID: ids[1], Err: errors.New("rejected")},
				{ID: ids[2], Err: errors.New("too large"), Permanent: true},
			},
		})
		add(testMessages(1, "a")...) // pending, never tried
		st := stats()
		if st.Pending != 2 || st.Retrying != 1 || st.Parked != 1 {
			t.Errorf("Stats() = %+v; want 2 pending (1 retrying), 1 parked", st)
		}
		// The store's clock may have a coarser grain than the process's:
		// a second of slack above.
		if maxAge := time.Since(before) + time.Second; st.OldestPending <= 0 || st.OldestPending > maxAge {
			t.Errorf("Stats().OldestPending = %v; want above 0 and at most %v", st.OldestPending, maxAge)
		}
		deadline := time.Now().Add(waitLimit)
		for st.Pending > 0 {
			publishAll(t, store, "a", 10)
			if time.Now().After(deadline) {
				t.Fatalf("Stats() = %+v %v after publishing everything claimable; want nothing pending", st, waitLimit)
			}
			time.Sleep(10 * time.Millisecond) // polling for a retry time to pass
			st = stats()
		}
		if want := (relay.Stats{Parked: 1}); st != want {
			t.Errorf("Stats() once everything but the parked message is published = %+v, want %+v", st, want)
		}
		if d, ok := store.(Discarder); ok {
			if _, err := d.Discard(ctx, ids[2]); err != nil {
				t.Fatal(err)
			}
			if st := stats(); st != (relay.Stats{}) {
				t.Errorf("Stats() after Discard of the parked message = %+v, want zero", st)
			}
		}
	})

	t.Run("RetentionDeletesOnlyOldPublished", func(t *testing.T) {
		t.Parallel()
		store, add := newStore(t)
		r, ok := store.(Retainer)
		if !ok {
			t.Skip("the store does not implement runtimetest.Retainer")
		}
		// Three published, one parked, one retrying, one never claimed.
		ids := add(testMessages(5, "a")...)
		b := claim(t, store, req("a", 10))
		markOutcome(t, store, b, relay.Outcome{
			Published: ids[:3],
			Failed: []relay.Failure{
				{ID: ids[3], Err: errors.New("too large"), Permanent: true},
				{ID: ids[4], Err: errors.New("rejected")},
			},
		})
		fresh := add(testMessages(1, "a")...)[0]
		if n, err := r.DeletePublished(ctx, time.Hour, 0); err != nil || n != 0 {
			t.Fatalf("DeletePublished(1h) = %d, %v; want 0 (nothing was published an hour ago)", n, err)
		}
		// Published just now: each becomes older than a zero retention as
		// soon as the store's clock moves on. One row per statement.
		var deleted int64
		deadline := time.Now().Add(waitLimit)
		for deleted < 3 {
			n, err := r.DeletePublished(ctx, 0, 1)
			if err != nil {
				t.Fatalf("DeletePublished(0, 1) = %v", err)
			}
			if deleted += n; deleted > 3 || time.Now().After(deadline) {
				t.Fatalf("DeletePublished(0) deleted %d rows in all; want the 3 published", deleted)
			}
			time.Sleep(time.Millisecond) // polling for the store's clock to move past published_at
		}
		if n, err := r.DeletePublished(ctx, 0, 0); err != nil || n != 0 {
			t.Errorf("DeletePublished(0) with nothing published left = %d, %v; want 0", n, err)
		}
		if sr, ok := store.(StatsReader); ok {
			if st, err := sr.Stats(ctx); err != nil || st.Pending != 2 || st.Parked != 1 {
				t.Errorf("Stats() after retention = %+v, %v; want 2 pending and 1 parked kept", st, err)
			}
		}
		// The pending messages are still there and go out; so does the
		// parked one once unparked.
		want := []int64{ids[4], fresh}
		if p, ok := store.(Parker); ok {
			if n, err := p.Unpark(ctx, ids[3]); err != nil || n != 1 {
				t.Errorf("Unpark(%d) after retention = %d, %v; want 1 (a parked message is kept)", ids[3], n, err)
			}
			want = []int64{ids[3], ids[4], fresh}
		}
		var got []int64
		deadline = time.Now().Add(waitLimit)
		for len(got) < len(want) && time.Now().Before(deadline) {
			got = append(got, idsOf(publishAll(t, store, "a", 10))...)
			time.Sleep(10 * time.Millisecond) // polling for a retry time to pass
		}
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("messages published after retention (-want +got):\n%s", diff)
		}
	})

	t.Run("ExclusiveBetweenOwners", func(t *testing.T) {
		t.Parallel()
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
		t.Parallel()
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
		t.Parallel()
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

	t.Run("InFlightLeftOut", func(t *testing.T) {
		t.Parallel()
		store, add := newStore(t)
		if _, ok := store.(relay.InFlightExcluder); !ok {
			t.Skip("the store is not a relay.InFlightExcluder")
		}
		// Aggregate x has messages 0-3, y has 4-5: the first claim takes
		// x's first two; the claim ahead must leave them out.
		msgs := testMessages(6, "a")
		for i := range msgs {
			msgs[i].AggregateID = "x"
			if i >= 4 {
				msgs[i].AggregateID = "y"
			}
		}
		ids := add(msgs...)
		first := claim(t, store, req("a", 2))
		if diff := cmp.Diff(ids[:2], idsOf(first.Messages)); diff != "" {
			t.Fatalf("first claim (-want +got):\n%s", diff)
		}
		ahead := claim(t, store, relay.ClaimRequest{Owner: "a", Limit: 10, InFlight: idsOf(first.Messages)})
		got := idsOf(ahead.Messages)
		if !slices.IsSorted(got) {
			t.Errorf("claim ahead returned %v, want ID order", got)
		}
		// A store may hold x back while its first messages are in
		// flight; if it returns x's later messages, they must be
		// ids[2:4], in order, before nothing of x is skipped.
		var gotX []int64
		for _, m := range ahead.Messages {
			if slices.Contains(idsOf(first.Messages), m.ID) {
				t.Fatalf("claim ahead returned in-flight message %d (got %v)", m.ID, got)
			}
			if m.AggregateID == "x" {
				gotX = append(gotX, m.ID)
			}
		}
		if len(gotX) > 0 && !slices.Equal(gotX, ids[2:2+len(gotX)]) {
			t.Errorf("claim ahead returned x's messages %v, want a prefix of %v", gotX, ids[2:4])
		}
		if !slices.Contains(got, ids[4]) || !slices.Contains(got, ids[5]) {
			t.Errorf("claim ahead returned %v, want y's messages %v among them", got, ids[4:])
		}
		mark(t, store, first, nil)
		mark(t, store, ahead, nil)
		rest := idsOf(publishAll(t, store, "a", 10))
		all := slices.Sorted(slices.Values(append(append(idsOf(first.Messages), got...), rest...)))
		if diff := cmp.Diff(ids, all); diff != "" {
			t.Errorf("published across the three claims (-want +got):\n%s", diff)
		}
	})

	t.Run("ConcurrentOwnersPublishOnceInOrder", func(t *testing.T) {
		t.Parallel()
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

// park adds a message and fails it until the store parks it: once with a
// permanent failure, or StoreTimings.MaxAttempts times while another
// message of the batch is published (so each attempt counts). It returns
// the message's ID and aggregate.
func park(t *testing.T, store relay.Store, add func(...runtime.OutboxMessage) []int64, permanent bool) (int64, string) {
	t.Helper()
	msg := testMessages(1, "a")[0]
	id := add(msg)[0]
	want := StoreTimings.MaxAttempts
	if permanent {
		want = 1
	}
	deadline := time.Now().Add(waitLimit)
	for failures := 0; failures < want; {
		add(testMessages(1, "a")...) // something else to publish beside it
		b := claim(t, store, req("a", 10))
		if !slices.ContainsFunc(b.Messages, func(m runtime.OutboxMessage) bool { return m.ID == id }) {
			mark(t, store, b, nil) // it waits for its retry time
			if time.Now().After(deadline) {
				t.Fatalf("message %d not claimed again within %v after %d failures", id, waitLimit, failures)
			}
			time.Sleep(20 * time.Millisecond) // polling for a retry time to pass
			continue
		}
		out := relay.Outcome{Failed: []relay.Failure{{ID: id, Err: errors.New("rejected"), Permanent: permanent}}}
		for _, m := range b.Messages {
			if m.ID != id {
				out.Published = append(out.Published, m.ID)
			}
		}
		markOutcome(t, store, b, out)
		if len(out.Published) > 0 || permanent {
			failures++
		}
	}
	return id, msg.AggregateID
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
