package hooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// TestRelayToRabbitMQ swaps the broker: the same relay publishes through
// Watermill's AMQP publisher (publisher confirms on) instead of Kafka, and
// every committed event arrives, in order per aggregate.
func TestRelayToRabbitMQ(t *testing.T) {
	uri := os.Getenv("OUTBOX_TEST_AMQP_URI")
	if uri == "" {
		uri = "amqp://guest:guest@127.0.0.1:5672/"
	}
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", u.Host, 3*time.Second); err != nil {
		hookstest.Unavailable(t, "RabbitMQ", u.Host, "OUTBOX_TEST_AMQP_URI", err)
	} else {
		c.Close()
	}

	db := hookstest.Postgres(t, nil)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Account{}); err != nil {
		t.Fatal(err)
	}
	queue := fmt.Sprintf("outbox-test-%d", rand.Int64())
	plugin, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return queue }})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(plugin); err != nil {
		t.Fatal(err)
	}
	store, err := hooks.NewStore(db, hooks.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}

	// A queue named after the topic, deleted when its consumer leaves.
	cfg := amqp.NewNonDurableQueueConfig(uri)
	cfg.Queue.AutoDelete = true
	cfg.Publish.ConfirmDelivery = true
	logger := watermill.NopLogger{}
	sub, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, queue) // declares the queue before anything is published
	if err != nil {
		t.Fatal(err)
	}
	pub, err := amqp.NewPublisher(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })

	(&pipeline{db: db, store: store}).runRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})

	// 10 accounts, 5 deposits each, committed one transaction at a time.
	accts := make([]Account, 10)
	if err := db.Create(&accts).Error; err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for round := range 5 {
		for i := range accts {
			accts[i].Deposit()
			want[accts[i].OutboxRecorder().Pending()[0].ID.String()] = round + 1
			if err := db.Save(&accts[i]).Error; err != nil {
				t.Fatal(err)
			}
		}
	}

	got := map[string]int{}
	last := map[string]int{}
	for len(got) < len(want) {
		select {
		case m := <-msgs:
			var d Deposited
			if err := json.Unmarshal(m.Payload, &d); err != nil {
				t.Fatalf("payload %s: %v", m.Payload, err)
			}
			agg := m.Metadata.Get(runtime.MetadataAggregateID)
			if d.Seq != last[agg]+1 {
				t.Errorf("aggregate %s: seq %d after %d", agg, d.Seq, last[agg])
			}
			last[agg] = d.Seq
			got[m.UUID] = d.Seq
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("received %d of %d events", len(got), len(want))
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events received (-want +got):\n%s", diff)
	}
}
