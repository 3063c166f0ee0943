package amqp_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/runtime"
)

// exampleURL is the broker the examples use.
func exampleURL() string {
	if u := os.Getenv("OUTBOX_TEST_AMQP_URI"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Example publishes an event before any subscriber has run (the publisher
// declares the topic's queue), then consumes it. It needs a RabbitMQ, so it
// has no Output line and only compiles under go test.
func Example() {
	cfg := amqp.Config{URL: exampleURL()} // ModeQueue: one durable queue per topic

	pub, err := amqp.NewPublisher(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	msg := message.NewMessage("0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b", []byte(`{"order_id":"order-7","total":42}`))
	msg.Metadata.Set(runtime.MetadataEventType, "order.placed")
	msg.Metadata.Set(runtime.MetadataAggregateID, "order-7")
	if err := pub.Publish("orders", msg); err != nil {
		log.Fatal(err) // nil only once the queue holds the message
	}

	sub, err := amqp.NewSubscriber(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	messages, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		log.Fatal(err)
	}
	got := <-messages
	got.Ack()
	fmt.Println(got.UUID, got.Metadata.Get(runtime.MetadataEventType))
}

// Example_pubSub fans each event out to several consumer groups. The
// publisher declares the queues of the groups it knows, so they miss nothing
// even if they have never run; another group gets what is published after
// it first subscribes.
func Example_pubSub() {
	cfg := amqp.Config{URL: exampleURL(), Mode: amqp.ModePubSub}

	pubCfg := cfg
	pubCfg.Groups = []string{"billing", "shipping"}
	pub, err := amqp.NewPublisher(pubCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	subCfg := cfg
	subCfg.Group = "billing" // consumes queue "orders_billing"
	sub, err := amqp.NewSubscriber(subCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	_ = pub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
	_, _ = sub.Subscribe(context.Background(), "orders")
}

// ExampleConfig_WatermillConfig builds a plain watermill-amqp subscriber
// that reads what an amqp.Publisher writes.
func ExampleConfig_WatermillConfig() {
	cfg := amqp.Config{URL: exampleURL(), Mode: amqp.ModePubSub}
	sub, err := wamqp.NewSubscriber(cfg.WatermillConfig("audit"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	_ = sub.SubscribeInitialize("orders") // declares "orders_audit"
}
