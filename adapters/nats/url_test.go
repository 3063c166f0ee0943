package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime"
)

// natsURL returns the test server's URL (serverURL), skipping t (or
// failing it, under OUTBOX_TEST_REQUIRE_INTEGRATION=1) when it is
// unreachable (connect).
func natsURL(t *testing.T) string {
	t.Helper()
	connect(t)
	return serverURL()
}

// deleteNATSStreams deletes the streams whose names start with prefix.
func deleteNATSStreams(t *testing.T, url, prefix string) {
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	for n := range js.StreamNames(ctx).Name() {
		if strings.HasPrefix(n, prefix+"_") {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Errorf("cleanup: delete stream %s: %v", n, err)
		}
	}
}

func TestOpenNATS(t *testing.T) {
	base := natsURL(t)
	prefix := "B" + strings.ReplaceAll(watermill.NewShortUUID(), "-", "")
	t.Cleanup(func() { deleteNATSStreams(t, base, prefix) })
	b, err := broker.Open(context.Background(), base+"?dedup_window=15m&stream_prefix="+prefix, broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if g := b.Guarantees(); !g.OrderPerAggregate || !g.Dedup || !g.Durable || !g.SharedAcrossProcesses {
		t.Errorf("Guarantees = %+v, want all true", g)
	}
	topic := "orders.placed." + watermill.NewShortUUID()
	var msgs []*message.Message
	for i := range 6 {
		agg := fmt.Sprintf("agg-%d", i%2)
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		m.Metadata.Set(runtime.MetadataAggregateID, agg)
		msgs = append(msgs, m)
	}
	if err := b.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
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

func TestOpenNATSBadParameters(t *testing.T) {
	for _, u := range []string{
		"nats://127.0.0.1:4222?bogus=1",
		"nats://127.0.0.1:4222?dedup_window=0s",
		"nats://127.0.0.1:4222?dedup_window=ten",
		"nats://127.0.0.1:4222?replicas=0",
		"nats://127.0.0.1:4222?stream_prefix=a.b",
		"nats://",
	} {
		if _, err := broker.Open(context.Background(), u, broker.Config{}); !errors.Is(err, broker.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", u, err)
		}
	}
}
