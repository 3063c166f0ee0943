package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/adapters/redis"
)

// TestRestartTakesOverPendingEntries: a subscriber stops (Close) holding an
// entry it did not ack; the group's next subscriber hands that entry out
// first, then the rest, in stream order, and leaves nothing pending.
// Before, the entry stayed pending until MaxIdleTime (60 s) and the new
// subscriber handed out the newer entries first: the aggregate's order
// broke across the restart. With SharedGroup the new subscriber leaves
// the entry to its holder, as before.
func TestRestartTakesOverPendingEntries(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("SharedGroup=%v", shared), func(t *testing.T) {
			client := connect(t)
			topic := keyPrefix(t, client) + "orders"
			pub := newPublisher(t, redis.PublisherConfig{})
			for seq := 1; seq <= 5; seq++ {
				if err := pub.Publish(topic, eventMessage("a", seq)); err != nil {
					t.Fatal(err)
				}
			}
			first := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing", Consumer: "first"})
			ctx, cancel := context.WithCancel(context.Background())
			ch, err := first.Subscribe(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			if got := receive(t, ch).Metadata.Get("seq"); got != "1" {
				t.Fatalf("first subscriber got seq %s, want 1", got)
			}
			// It stops without acking seq 1.
			cancel()
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			// seq 1, and any entry read ahead while it was handled.
			held := pendingCount(t, client, topic)
			if held < 1 {
				t.Fatalf("%d entries pending after the stop, want at least seq 1", held)
			}

			second := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing", Consumer: "second", SharedGroup: shared})
			ch, err = second.Subscribe(context.Background(), topic)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"1", "2", "3", "4", "5"}
			if shared {
				want = want[held:] // the held entries wait for MaxIdleTime
			}
			for _, w := range want {
				m := receive(t, ch)
				if got := m.Metadata.Get("seq"); got != w {
					t.Fatalf("second subscriber got seq %s, want %s (order %v)", got, w, want)
				}
				m.Ack()
			}
			wantPending := int64(0)
			if shared {
				wantPending = held
			}
			// The acks are sent in the background.
			deadline := time.Now().Add(waitTimeout)
			for pendingCount(t, client, topic) != wantPending && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polling for the outcome
			}
			if n := pendingCount(t, client, topic); n != wantPending {
				t.Errorf("%d entries pending at the end, want %d", n, wantPending)
			}
		})
	}
}

// TestTakeOverRedeliversANackedEntry: a taken-over entry that is nacked is
// handed out again before anything newer.
func TestTakeOverRedeliversANackedEntry(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "orders"
	pub := newPublisher(t, redis.PublisherConfig{})
	for seq := 1; seq <= 2; seq++ {
		if err := pub.Publish(topic, eventMessage("a", seq)); err != nil {
			t.Fatal(err)
		}
	}
	first := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing"})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := first.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, ch) // seq 1, not acked
	cancel()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing"})
	ch, err = second.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch)
	if got := m.Metadata.Get("seq"); got != "1" {
		t.Fatalf("got seq %s, want the taken-over 1", got)
	}
	m.Nack()
	for _, w := range []string{"1", "2"} {
		m := receive(t, ch)
		if got := m.Metadata.Get("seq"); got != w {
			t.Fatalf("after the nack got seq %s, want %s", got, w)
		}
		m.Ack()
	}
}

// pendingCount is the number of entries pending in the group billing of
// topic.
func pendingCount(t *testing.T, client *goredis.Client, topic string) int64 {
	t.Helper()
	p, err := client.XPending(context.Background(), topic, "billing").Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}
