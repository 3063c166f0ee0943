package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/redis"
	"github.com/gooutbox/outbox/runtime"
)

// Example publishes an event and consumes it in a consumer group. It needs a
// Redis server at 127.0.0.1:6379, so it is compiled but not run by go test.
func Example() {
	pub, err := redis.NewPublisher(redis.PublisherConfig{URL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := redis.NewSubscriber(redis.SubscriberConfig{
		URL:           "redis://127.0.0.1:6379/0",
		ConsumerGroup: "billing",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	msg := message.NewMessage("0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b", []byte(`{"order_id":"order-7"}`))
	msg.Metadata.Set(runtime.MetadataEventType, "order.placed")
	msg.Metadata.Set(runtime.MetadataAggregateID, "order-7")
	if err := pub.Publish("orders", msg); err != nil {
		log.Fatal(err)
	}
	messages, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		log.Fatal(err)
	}
	got := <-messages
	fmt.Println(got.UUID, got.Metadata.Get(runtime.MetadataEventType))
	got.Ack()
}

// ExamplePublisherConfig opts in to trimming by age: every group must read
// an entry within a week, or lose it.
func ExamplePublisherConfig() {
	pub, err := redis.NewPublisher(redis.PublisherConfig{
		URL:    "redis://127.0.0.1:6379/0",
		MaxAge: 7 * 24 * time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	fmt.Println("publisher ready")
	// Output: publisher ready
}
