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

// consumerNames lists the group's consumers of topic.
func consumerNames(t *testing.T, client *goredis.Client, topic, group string) map[string]int64 {
	t.Helper()
	cs, err := client.XInfoConsumers(context.Background(), topic, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, c := range cs {
		out[c.Name] = c.Pending
	}
	return out
}

// TestConsumersDoNotPileUp: every subscriber has a consumer name of its own
// (a random one by default), and Redis keeps each consumer a group has
// had. A subscriber that closes with nothing pending deletes its consumer;
// one that takes the group over deletes the consumers that died, once
// they hold nothing (it took their pending entries) and have been idle
// long enough. Before, each restart left one more consumer in the group.
func TestConsumersDoNotPileUp(t *testing.T) {
	client := connect(t)
	ctx := context.Background()
	topic := keyPrefix(t, client) + "orders"
	pub := newPublisher(t, redis.PublisherConfig{})
	for seq := 1; seq <= 4; seq++ {
		if err := pub.Publish(topic, eventMessage("a", seq)); err != nil {
			t.Fatal(err)
		}
	}
	// Two subscribers that died: one read seq 1 and acked it, the other
	// read seq 2 and did not.
	if err := client.XGroupCreateMkStream(ctx, topic, "billing", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for _, dead := range []string{"dead-acked", "dead-holding"} {
		streams, err := client.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: "billing", Consumer: dead, Streams: []string{topic, ">"}, Count: 1}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if dead == "dead-acked" {
			if err := client.XAck(ctx, topic, "billing", streams[0].Messages[0].ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer redis.SetStaleAfter(0)()

	sub := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing"})
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2", "3", "4"} {
		m := receive(t, ch)
		if got := m.Metadata.Get("seq"); got != want {
			t.Fatalf("got seq %s, want %s", got, want)
		}
		m.Ack()
	}
	names := consumerNames(t, client, topic, "billing")
	if _, ok := names["dead-acked"]; ok {
		t.Errorf("the dead consumers are still in the group after a subscription took it over: %v", names)
	}
	if _, ok := names["dead-holding"]; ok {
		t.Errorf("the dead consumer whose entry was taken over is still in the group: %v", names)
	}
	if len(names) != 1 {
		t.Errorf("consumers while one subscriber reads: %v, want only its own", names)
	}
	// The subscriber acks in the background: close once the acks landed.
	deadline := time.Now().Add(waitTimeout)
	for pendingCount(t, client, topic) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries still pending %v after the handler acked them all", pendingCount(t, client, topic), waitTimeout)
		}
		time.Sleep(5 * time.Millisecond) // polling for the outcome
	}
	cancel()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if names := consumerNames(t, client, topic, "billing"); len(names) != 0 {
		t.Errorf("consumers after the subscriber closed with nothing pending: %v, want none", names)
	}
}

// TestConsumerHoldingAnEntryIsKeptAtClose: a subscriber that closes holding
// an entry it did not ack keeps its consumer, since deleting it would drop
// the entry from the group's pending entries, and nothing would deliver it
// again.
func TestConsumerHoldingAnEntryIsKeptAtClose(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "orders"
	pub := newPublisher(t, redis.PublisherConfig{})
	if err := pub.Publish(topic, eventMessage("a", 1)); err != nil {
		t.Fatal(err)
	}
	sub := newSubscriber(t, redis.SubscriberConfig{ConsumerGroup: "billing", Consumer: "holder"})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, ch) // not acked
	cancel()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if names := consumerNames(t, client, topic, "billing"); names["holder"] != 1 {
		t.Errorf("consumers after a close holding an entry: %v, want holder with 1 pending", names)
	}
}
