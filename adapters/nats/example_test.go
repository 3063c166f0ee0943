package nats_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/nats"
	"github.com/gooutbox/outbox/runtime"
)

// Example publishes an event to a dotted topic and consumes it in a
// consumer group. It needs a NATS server with JetStream at 127.0.0.1:4222,
// so it is compiled but not run by go test.
func Example() {
	stream := nats.StreamConfig{DedupWindow: 15 * time.Minute}
	pub, err := nats.NewPublisher(nats.PublisherConfig{URL: "nats://127.0.0.1:4222", Stream: stream})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := nats.NewSubscriber(nats.SubscriberConfig{
		URL:           "nats://127.0.0.1:4222",
		ConsumerGroup: "billing",
		Stream:        stream,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	msg := message.NewMessage("0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b", []byte(`{"order_id":"order-7"}`))
	msg.Metadata.Set(runtime.MetadataEventType, "order.placed")
	msg.Metadata.Set(runtime.MetadataAggregateID, "order-7")
	// The stream OUTBOX_orders_placed_<hash> is created on first publish;
	// publishing the same UUID again is acknowledged as a duplicate.
	if err := pub.Publish("orders.placed", msg); err != nil {
		log.Fatal(err)
	}

	messages, err := sub.Subscribe(context.Background(), "orders.placed")
	if err != nil {
		log.Fatal(err)
	}
	got := <-messages
	fmt.Println(got.UUID, got.Metadata.Get(runtime.MetadataEventType))
	got.Ack()
}

// ExampleStreamConfig bounds the streams the adapter creates by age, and
// replicates them on a three-server cluster.
func ExampleStreamConfig() {
	pub, err := nats.NewPublisher(nats.PublisherConfig{
		URL: "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222",
		Stream: nats.StreamConfig{
			Prefix:   "SHOP",
			Replicas: 3,
			Configure: func(c *jetstream.StreamConfig) {
				c.MaxAge = 7 * 24 * time.Hour // consumers must keep up within a week
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
}

// ExampleStreamName shows the stream a topic gets.
func ExampleStreamName() {
	fmt.Println(nats.StreamName("OUTBOX", "orders.created"))
	// Output: OUTBOX_orders_created_18d455b7
}
