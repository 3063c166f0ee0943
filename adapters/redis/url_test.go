package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime"
)

// redisURL returns the test server's URL (serverURL), skipping t (or
// failing it, under OUTBOX_TEST_REQUIRE_INTEGRATION=1) when it is
// unreachable (connect).
func redisURL(t *testing.T) string {
	t.Helper()
	connect(t)
	return serverURL()
}

func TestOpenRedis(t *testing.T) {
	base := redisURL(t)
	b, err := broker.Open(context.Background(), base+"?maxlen=100000", broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if g := b.Guarantees(); !g.OrderPerAggregate || !g.Dedup || g.Durable || !g.SharedAcrossProcesses {
		t.Errorf("Guarantees = %+v, want order, dedup and shared only", g)
	}
	topic := "outbox-test:broker:" + watermill.NewShortUUID()
	opts, _ := goredis.ParseURL(base)
	c := goredis.NewClient(opts)
	t.Cleanup(func() {
		defer c.Close()
		// The stream and its deduplication keys.
		keys, err := c.Keys(context.Background(), "{"+topic+"}:outbox:dedup:*").Result()
		if err == nil {
			err = c.Del(context.Background(), append(keys, topic)...).Err()
		}
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	var msgs []*message.Message
	for i := range 6 {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		m.Metadata.Set(runtime.MetadataAggregateID, fmt.Sprintf("agg-%d", i%2))
		msgs = append(msgs, m)
	}
	if err := b.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// A republish (the relay's, after an ambiguous failure) adds nothing.
	if err := b.Publisher().Publish(topic, msgs[2:]...); err != nil {
		t.Fatalf("republish: %v", err)
	}
	if n := c.XLen(context.Background(), topic).Val(); n != int64(len(msgs)) {
		t.Errorf("XLEN = %d after a republish, want %d (deduplicated)", n, len(msgs))
	}
	sub, err := b.Subscriber("g1")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for range msgs {
		select {
		case m := <-ch:
			m.Ack()
			agg := m.Metadata.Get(runtime.MetadataAggregateID)
			got[agg] = append(got[agg], string(m.Payload))
		case <-time.After(30 * time.Second):
			t.Fatal("timed out waiting for messages")
		}
	}
	if a, b := strings.Join(got["agg-0"], ","), strings.Join(got["agg-1"], ","); a != "0,2,4" || b != "1,3,5" {
		t.Errorf("order per aggregate: agg-0 %s, agg-1 %s; want 0,2,4 and 1,3,5", a, b)
	}
}

// TestOpenRedisDedupWindow: dedupwindow sets the window, and off disables
// deduplication, which Guarantees reports.
func TestOpenRedisDedupWindow(t *testing.T) {
	for _, tt := range []struct {
		query string
		dedup bool
	}{
		{"", true},
		{"?dedupwindow=0", true},
		{"?dedupwindow=1h", true},
		{"?dedupwindow=1ms&maxage=24h", true},
		{"?dedupwindow=off", false},
	} {
		b, err := broker.Open(context.Background(), "redis://127.0.0.1:6379/0"+tt.query, broker.Config{})
		if err != nil {
			t.Errorf("Open(%q): %v", tt.query, err)
			continue
		}
		if g := b.Guarantees(); g.Dedup != tt.dedup {
			t.Errorf("Open(%q).Guarantees().Dedup = %v, want %v", tt.query, g.Dedup, tt.dedup)
		}
		b.Close()
	}
}

func TestOpenRedisBadParameters(t *testing.T) {
	for _, u := range []string{
		"redis://127.0.0.1:6379/0?bogus=1",
		"redis://127.0.0.1:6379/0?maxlen=0",
		"redis://127.0.0.1:6379/0?maxlen=x",
		"redis://127.0.0.1:6379/0?maxage=-1s",
		"redis://127.0.0.1:6379/0?maxlen=10&maxage=1h",
		"redis://127.0.0.1:6379/0?dedupwindow=-1s",
		"redis://127.0.0.1:6379/0?dedupwindow=x",
		"redis://127.0.0.1:6379/0?dedupwindow=500us",
		"redis://127.0.0.1:6379/0?dedupwindow=on",
		"redis://127.0.0.1:6379/x",
		"redis://",
	} {
		if _, err := broker.Open(context.Background(), u, broker.Config{}); !errors.Is(err, broker.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", u, err)
		}
	}
}
