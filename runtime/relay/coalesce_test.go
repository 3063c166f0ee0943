package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// streamStore hands out partial batches of size n, one per claim, as a fast
// stream of messages would: every claim finds n new messages.
type streamStore struct {
	n      int
	claims chan int // receives the number of each claim

	mu   sync.Mutex
	next int
}

func (s *streamStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	s.mu.Lock()
	msgs := make([]runtime.OutboxMessage, 0, s.n)
	for range s.n {
		s.next++
		msgs = append(msgs, newMessage(s.next, "t"))
	}
	claim := s.next / s.n
	s.mu.Unlock()
	select {
	case s.claims <- claim:
	case <-ctx.Done():
		return relay.Batch{}, ctx.Err()
	}
	return relay.Batch{Messages: msgs}, nil
}

func (s *streamStore) Mark(context.Context, relay.Batch, relay.Outcome) error { return nil }

// coalescingRelay starts a relay on a streamStore of partial batches of n
// messages (BatchSize 10), with cfg's CoalesceRows and a wait that only a
// cancellation ends (ActivePollInterval and CoalesceMax an hour).
func coalescingRelay(t *testing.T, n, rows int) (*streamStore, func() error) {
	t.Helper()
	store := &streamStore{n: n, claims: make(chan int, 16)}
	r, err := relay.New(store, &fakePublisher{}, relay.Config{
		BatchSize: 10, PollInterval: never, ActivePollInterval: never, CoalesceRows: rows, CoalesceMax: never,
	})
	if err != nil {
		t.Fatal(err)
	}
	return store, start(t, context.Background(), r)
}

// nextClaim waits for the store's next claim.
func nextClaim(t *testing.T, s *streamStore) int {
	t.Helper()
	select {
	case c := <-s.claims:
		return c
	case <-time.After(waitTimeout):
		t.Fatalf("no claim within %v", waitTimeout)
		return 0
	}
}

func TestCoalescingWaitsAfterAPartialBatchOfAFastStream(t *testing.T) {
	// 5 messages of a batch of 10, CoalesceRows 2: the stream is fast, and
	// the relay waits (an hour here) before it claims again; Run still
	// returns at once when cancelled.
	store, stop := coalescingRelay(t, 5, 2)
	if c := nextClaim(t, store); c != 1 {
		t.Fatalf("first claim #%d", c)
	}
	// The absence of a claim can only be checked for a while: a relay
	// that does not coalesce claims again within microseconds.
	select {
	case c := <-store.claims:
		t.Fatalf("claim #%d right after a partial batch of 5 with CoalesceRows 2: the relay did not wait", c)
	case <-time.After(200 * time.Millisecond):
	}
	if err := stop(); err != nil {
		t.Fatalf("Run during the coalescing wait, cancelled: %v", err)
	}
}

func TestCoalescingLeavesSlowStreamsAndOffAlone(t *testing.T) {
	// A batch smaller than CoalesceRows, a full batch (a backlog: no
	// wait slows it), and any batch with coalescing off, is followed by
	// the next claim at once: those relays claim three times although
	// every wait they could take lasts an hour.
	for _, tc := range []struct {
		name    string
		n, rows int
	}{
		{"batch below CoalesceRows", 3, 4},
		{"full batch", 10, 2},
		{"CoalesceRows negative", 5, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, _ := coalescingRelay(t, tc.n, tc.rows)
			for want := 1; want <= 3; want++ {
				if c := nextClaim(t, store); c != want {
					t.Fatalf("claim #%d, want #%d", c, want)
				}
			}
		})
	}
}
