package kafka_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime"
)

// Example publishes an event and consumes it in a consumer group, against an
// in-process Kafka cluster.
func Example() {
	cluster, err := kafkatest.Start(kafkatest.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Addrs()

	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:         brokers,
		ConsumerGroup:   "billing",
		TopicPartitions: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("orders"); err != nil {
		log.Fatal(err)
	}
	messages, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		log.Fatal(err)
	}

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	msg := message.NewMessage("0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b", []byte(`{"order_id":"order-7","total":42}`))
	msg.Metadata.Set(runtime.MetadataEventType, "order.placed")
	msg.Metadata.Set(runtime.MetadataEventVersion, "1")
	msg.Metadata.Set(runtime.MetadataAggregateType, "order")
	msg.Metadata.Set(runtime.MetadataAggregateID, "order-7") // the Kafka key
	if err := pub.Publish("orders", msg); err != nil {
		log.Fatal(err)
	}

	got := <-messages
	info, _ := kafka.RecordInfoFromContext(got.Context())
	fmt.Println("uuid:", got.UUID)
	fmt.Println("key:", string(info.Key))
	fmt.Println("payload:", string(got.Payload))
	keys := make([]string, 0, len(got.Metadata))
	for k := range got.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("metadata %s: %s\n", k, got.Metadata[k])
	}
	got.Ack() // commits the offset

	// Output:
	// uuid: 0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b
	// key: order-7
	// payload: {"order_id":"order-7","total":42}
	// metadata aggregate_id: order-7
	// metadata aggregate_type: order
	// metadata event_id: 0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b
	// metadata event_type: order.placed
	// metadata event_version: 1
}
