package relay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func ExampleNew() {
	// The outbox: in production, sqlstore.Store on PostgreSQL or SQLite.
	store := &runtimetest.MemoryStore{}
	// The broker: any Watermill publisher (Kafka, AMQP, NATS, ...). This
	// in-process one delivers in order only when Publish waits for acks.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, nil)
	defer pubSub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received, err := pubSub.Subscribe(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}

	r, err := relay.New(store, pubSub, relay.Config{BatchSize: 500})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	// A transaction commits two events; for stores that cannot notify
	// (SQLite), Notify wakes the relay at once instead of at its next poll.
	for i, id := range []string{"42", "43"} {
		store.Add(runtime.OutboxMessage{
			Topic: "orders",
			Envelope: runtime.Envelope{
				EventID:       uuid.MustParse(fmt.Sprintf("0190f5a4-0000-7000-8000-00000000000%d", i)),
				EventType:     "orders.order_placed",
				EventVersion:  1,
				AggregateType: "order",
				AggregateID:   id,
				OccurredAt:    time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
				Payload:       []byte(`{"order_id":"` + id + `","event_version":1}`),
			},
		})
	}
	r.Notify()

	for range 2 {
		msg := <-received
		fmt.Println(msg.UUID, msg.Metadata.Get(runtime.MetadataEventType), msg.Metadata.Get(runtime.MetadataAggregateID), string(msg.Payload))
		msg.Ack()
	}

	cancel()
	fmt.Println("Run:", <-done)
	fmt.Println("pending:", len(store.Pending()))
	// Output:
	// 0190f5a4-0000-7000-8000-000000000000 orders.order_placed 42 {"order_id":"42","event_version":1}
	// 0190f5a4-0000-7000-8000-000000000001 orders.order_placed 43 {"order_id":"43","event_version":1}
	// Run: <nil>
	// pending: 0
}

// ExampleConfig_cloudEvents publishes CloudEvents in binary content mode
// instead of the native metadata.
func ExampleConfig_cloudEvents() {
	store := &runtimetest.MemoryStore{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, nil)
	defer pubSub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received, err := pubSub.Subscribe(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}

	r, err := relay.New(store, pubSub, relay.Config{CloudEvents: &runtime.CloudEvents{
		Source:         "/orders-service",
		DataSchemaBase: "https://schemas.example.com/outbox",
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	store.Add(runtime.OutboxMessage{
		Topic: "orders",
		Envelope: runtime.Envelope{
			EventID:       uuid.MustParse("0190f5a4-0000-7000-8000-000000000001"),
			EventType:     "orders.order_placed",
			EventVersion:  1,
			AggregateType: "order",
			AggregateID:   "42",
			OccurredAt:    time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
			Payload:       []byte(`{"order_id":"42","event_version":1}`),
		},
	})
	r.Notify()

	msg := <-received
	msg.Ack()
	for _, k := range []string{"ce_id", "ce_type", "ce_source", "ce_time", "ce_dataschema", runtime.MetadataEventType} {
		fmt.Printf("%s=%q\n", k, msg.Metadata.Get(k))
	}
	cancel()
	if err := <-done; err != nil {
		fmt.Println(err)
	}
	// Output:
	// ce_id="0190f5a4-0000-7000-8000-000000000001"
	// ce_type="orders.order_placed"
	// ce_source="/orders-service"
	// ce_time="2025-01-02T03:04:05Z"
	// ce_dataschema="https://schemas.example.com/outbox/orders.order_placed/v1.schema.json"
	// event_type=""
}
