package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// handOverStore is a store that divides the outbox among relays: it
// records its claims and hand-overs, and hands over when others says
// another relay is alive.
type handOverStore struct {
	*runtimetest.MemoryStore
	others atomic.Bool

	mu        sync.Mutex
	claims    []time.Time
	handOvers []time.Time
}

func (s *handOverStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	s.mu.Lock()
	s.claims = append(s.claims, time.Now())
	s.mu.Unlock()
	return s.MemoryStore.Claim(ctx, req)
}

func (s *handOverStore) HandOver(ctx context.Context, owner string) (bool, error) {
	s.mu.Lock()
	s.handOvers = append(s.handOvers, time.Now())
	s.mu.Unlock()
	return s.others.Load(), nil
}

// record returns copies of the claims' and hand-overs' times.
func (s *handOverStore) record() (claims, handOvers []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.claims...), append([]time.Time(nil), s.handOvers...)
}

// until polls cond until it holds, failing t after waitTimeout.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling for the outcome
	}
}

// brokerDownRelay starts a relay over store whose every publish fails, as
// a broker cut off does, with the given HandOverAfter, and returns its
// logs.
func brokerDownRelay(t *testing.T, store *handOverStore, after time.Duration) *runtimetest.LogBuffer {
	t.Helper()
	store.Add(newMessage(1, "orders"), newMessage(2, "orders"))
	pub := &fakePublisher{fn: func(string, []*message.Message) error { return errors.New("dial tcp: i/o timeout") }}
	logs := &runtimetest.LogBuffer{}
	r, err := relay.New(store, pub, relay.Config{
		HandOverAfter: after,
		MinBackoff:    time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		PollInterval: 5 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	return logs
}

// TestHandsOverWhenNothingCanBePublished: a relay whose every publish
// fails (its broker is cut off) hands its shards over once that has lasted
// HandOverAfter and another relay is alive, then claims nothing for
// HandOverAfter; back, and failing again, it waits twice as long before it
// hands over again.
func TestHandsOverWhenNothingCanBePublished(t *testing.T) {
	const after = 150 * time.Millisecond
	store := &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: time.Millisecond}}
	store.others.Store(true)
	begin := time.Now()
	logs := brokerDownRelay(t, store, after)

	until(t, "two hand-overs", func() bool { _, h := store.record(); return len(h) >= 2 })
	claims, handOvers := store.record()
	if first := handOvers[0].Sub(begin); first < after {
		t.Errorf("first hand-over %v after the relay started, before the failures had lasted HandOverAfter (%v)", first, after)
	}
	var back time.Time // the first claim after the first hand-over
	for _, c := range claims {
		if c.After(handOvers[0]) {
			back = c
			break
		}
	}
	if aside := back.Sub(handOvers[0]); aside < after {
		t.Errorf("the relay claimed again %v after handing over; want it to stand aside for HandOverAfter (%v)", aside, after)
	}
	if again := handOvers[1].Sub(back); again < 2*after {
		t.Errorf("second hand-over %v after the relay came back; want at least twice HandOverAfter (%v)", again, 2*after)
	}
	if l := logs.String(); !strings.Contains(l, "relay: handed its shards over") || !strings.Contains(l, "stand_aside=150ms") ||
		!strings.Contains(l, "relay: stood aside; claiming again") {
		t.Errorf("the hand-over is not logged with its stand-aside:\n%s", l)
	}
}

// TestKeepsItsShardsWithNoOtherRelayAlive: with no other relay to take
// them, the relay keeps its shards and claims on (it publishes as soon as
// the broker is back), asking again once the failures have lasted as long
// again.
func TestKeepsItsShardsWithNoOtherRelayAlive(t *testing.T) {
	const after = 100 * time.Millisecond
	store := &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: time.Millisecond}}
	logs := brokerDownRelay(t, store, after)

	until(t, "two refused hand-overs", func() bool { _, h := store.record(); return len(h) >= 2 })
	claims, handOvers := store.record()
	if again := handOvers[1].Sub(handOvers[0]); again < after {
		t.Errorf("asked to hand over again %v after a refusal; want HandOverAfter (%v) in between", again, after)
	}
	n := 0
	for _, c := range claims {
		if c.After(handOvers[0]) && c.Before(handOvers[1]) {
			n++
		}
	}
	if n < 2 {
		t.Errorf("%d claims between two refused hand-overs: the relay stood aside with no other relay alive", n)
	}
	if l := logs.String(); !strings.Contains(l, "no other relay is alive") || strings.Contains(l, "handed its shards over") {
		t.Errorf("the refused hand-over is not logged as such:\n%s", l)
	}
}

// TestHandOverAfterNegativeNeverHandsOver: HandOverAfter < 0 turns
// hand-overs off, however long the failures last.
func TestHandOverAfterNegativeNeverHandsOver(t *testing.T) {
	store := &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: time.Millisecond}}
	store.others.Store(true)
	begin := time.Now()
	brokerDownRelay(t, store, -1)
	// Failing claims for longer than a short HandOverAfter would wait.
	until(t, "claims over 300ms", func() bool {
		c, _ := store.record()
		return len(c) > 0 && c[len(c)-1].Sub(begin) > 300*time.Millisecond
	})
	if _, h := store.record(); len(h) != 0 {
		t.Errorf("%d hand-overs with HandOverAfter < 0", len(h))
	}
}

// TestAPublishedMessageEndsTheStreak: a relay whose rounds fail one in two
// (a flaky broker, not a cut) publishes on and never hands over, however
// long that lasts. HandOverAfter is long beside the rounds (a millisecond
// or so) so that only a success ending the streak keeps the relay from
// handing over, not a scheduler that stalls one publish under CI's load.
func TestAPublishedMessageEndsTheStreak(t *testing.T) {
	const after = 300 * time.Millisecond
	store := &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: time.Millisecond}}
	store.others.Store(true)
	var calls atomic.Int64
	pub := &fakePublisher{fn: func(string, []*message.Message) error {
		if calls.Add(1)%2 == 0 {
			return errors.New("broker: timeout")
		}
		return nil
	}}
	r, err := relay.New(store, pub, relay.Config{HandOverAfter: after, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		PollInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	begin := time.Now()
	for n := 1; time.Since(begin) < 4*after; n++ {
		store.Add(newMessage(n, "orders"))
		// Paced so that most rounds find one message: a stream of events.
		time.Sleep(time.Millisecond)
	}
	until(t, "the stream published", func() bool { return len(store.Pending()) == 0 })
	if calls.Load() < 20 {
		t.Fatalf("only %d publish calls in %v", calls.Load(), 4*after)
	}
	if _, h := store.record(); len(h) != 0 {
		t.Errorf("%d hand-overs while every other round published", len(h))
	}
}

// TestFailuresFarApartAreNoOutage: two failed rounds further apart than
// HandOverAfter, with nothing failing in between (the relay had nothing to
// publish), are two short outages, not one that lasted: no hand-over.
func TestFailuresFarApartAreNoOutage(t *testing.T) {
	const after = 100 * time.Millisecond
	// A failed message is claimed again 3×HandOverAfter later, and the
	// relay has nothing else to publish meanwhile.
	store := &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: 3 * after}}
	store.others.Store(true)
	store.Add(newMessage(1, "orders"))
	var calls atomic.Int64
	pub := &fakePublisher{fn: func(string, []*message.Message) error {
		if calls.Add(1) <= 2 {
			return errors.New("broker: timeout")
		}
		return nil
	}}
	r, err := relay.New(store, pub, relay.Config{HandOverAfter: after, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	until(t, "the message published on its third try", func() bool { return len(store.Pending()) == 0 })
	if _, h := store.record(); len(h) != 0 {
		t.Errorf("%d hand-overs after two failures %v apart", len(h), 3*after)
	}
}

// peerStore is a handOverStore that also says how many other relays are
// alive (relay.PeerCounter), as sqlstore.Store does.
type peerStore struct {
	*handOverStore
	asked atomic.Int64
}

func (s *peerStore) OthersAlive(ctx context.Context, owner string) (int, error) {
	s.asked.Add(1)
	if s.others.Load() {
		return 1, nil
	}
	return 0, nil
}

// TestNoPeerKeepsPublishingPastHandOverAfter: after a failed round, a
// relay whose next publish hangs past HandOverAfter (a broker frozen, then
// confirming) lets it run its course when no other relay is alive: the
// broker's confirmation counts, and nothing is sent again. With another
// relay alive, the publish is cut short at the hand-over time, as before.
func TestNoPeerKeepsPublishingPastHandOverAfter(t *testing.T) {
	for _, others := range []bool{false, true} {
		t.Run(fmt.Sprintf("others=%v", others), func(t *testing.T) {
			const after = 100 * time.Millisecond
			store := &peerStore{handOverStore: &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: time.Millisecond}}}
			store.others.Store(others)
			store.Add(newMessage(1, "orders"))
			var calls atomic.Int64
			pub := &fakePublisher{fn: func(string, []*message.Message) error {
				if calls.Add(1) == 1 {
					return errors.New("broker: connection reset") // the streak begins
				}
				if calls.Load() == 2 {
					time.Sleep(4 * after) // the broker, frozen, confirms late
				}
				return nil
			}}
			logs := &runtimetest.LogBuffer{}
			r, err := relay.New(store, pub, relay.Config{HandOverAfter: after, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
				PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			start(t, context.Background(), r)
			until(t, "the message published", func() bool { return len(store.Pending()) == 0 })
			abandoned := strings.Contains(logs.String(), "publish abandoned")
			if !others {
				if abandoned || calls.Load() != 2 {
					t.Errorf("with no other relay alive: %d publish calls, abandoned=%v; want 2 and the late confirmation kept:\n%s", calls.Load(), abandoned, logs)
				}
				if store.asked.Load() == 0 {
					t.Error("the store was never asked whether another relay is alive")
				}
			} else if !abandoned {
				t.Errorf("with another relay alive the hanging publish was not cut short at the hand-over time:\n%s", logs)
			}
		})
	}
}
