package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// leaseEndingStore gives every batch it claims a lease of ttl.
type leaseEndingStore struct {
	*handOverStore
	ttl time.Duration
}

func (s *leaseEndingStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	b, err := s.handOverStore.Claim(ctx, req)
	if len(b.Messages) > 0 {
		b.Deadline = time.Now().Add(s.ttl)
	}
	return b, err
}

// TestLeaseLostWhilePausedIsNoBrokerOutage: a publish cut short by the
// end of the batch's lease is no broker outage when the relay was paused
// (the publish ended long after the lease did): it is logged as a lease
// lost while paused, the relay claims again at once, and however long it
// goes on it never hands its shards over for it (it would log that nothing
// could be published, which is untrue). A lease that ends on time (the
// broker too slow, or cut off) is an outage as before: the relay hands
// over.
func TestLeaseLostWhilePausedIsNoBrokerOutage(t *testing.T) {
	for _, paused := range []bool{true, false} {
		t.Run(map[bool]string{true: "paused", false: "broker too slow"}[paused], func(t *testing.T) {
			const after = 50 * time.Millisecond
			inner := &handOverStore{MemoryStore: &runtimetest.MemoryStore{RetryDelay: time.Millisecond}}
			inner.others.Store(true)
			inner.Add(newMessage(1, "orders"))
			store := &leaseEndingStore{handOverStore: inner, ttl: 10 * time.Millisecond}
			causes := make(chan error, 1)
			pub := &fakePublisher{fn: func(_ string, msgs []*message.Message) error {
				ctx := msgs[0].Context()
				<-ctx.Done()
				select {
				case causes <- context.Cause(ctx):
				default:
				}
				return ctx.Err()
			}}
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
			if paused {
				// Every publish ends as if the process had been stopped
				// for a second past the lease's end.
				relay.SetSince(r, func(t time.Time) time.Duration { return time.Since(t) + time.Second })
			}
			start(t, context.Background(), r)
			if cause := receive(t, causes); !errors.Is(cause, relay.ErrLeaseEnded) {
				t.Errorf("the publish context's cause = %v, want the lease's end", cause)
			}
			if !paused {
				until(t, "a hand-over", func() bool {
					_, handOvers := inner.record()
					return len(handOvers) > 0
				})
				return
			}
			until(t, "rounds for 6 x HandOverAfter", func() bool {
				claims, _ := inner.record()
				return len(claims) > 1 && claims[len(claims)-1].Sub(claims[0]) > 6*after
			})
			if _, handOvers := inner.record(); len(handOvers) > 0 {
				t.Errorf("the relay handed over %d times for publishes its lost lease cut short; want none", len(handOvers))
			}
			if !strings.Contains(logs.String(), `level=WARN msg="relay: the lease ended during a publish;`) {
				t.Errorf("no WARN about the lease lost while paused in the logs:\n%s", logs.String())
			}
		})
	}
}
