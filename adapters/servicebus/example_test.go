package servicebus_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/servicebus"
	"github.com/gooutbox/outbox/adapters/servicebus/servicebustest"
)

// Example publishes an aggregate's events to a topic and receives them
// from a session-enabled subscription, in order. On Azure, the client is
// servicebus.NewSDKClient(connectionString) instead of the fake.
func Example() {
	ns := servicebustest.New()
	ns.CreateTopic("order", "billing")
	var client servicebus.Client = ns

	pub, err := servicebus.NewPublisher(servicebus.PublisherConfig{Client: client, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	for i, id := range []string{"0195a0d1-0000-7000-8000-000000000001", "0195a0d1-0000-7000-8000-000000000002"} {
		m := message.NewMessage(id, []byte(fmt.Sprintf(`{"step":%d}`, i)))
		m.Metadata.Set("aggregate_type", "order")
		m.Metadata.Set("aggregate_id", "42") // the session id
		if err := pub.Publish("order", m); err != nil {
			fmt.Println(err)
			return
		}
	}

	sub, err := servicebus.NewSubscriber(servicebus.SubscriberConfig{Client: client, Subscription: "billing", Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(context.Background(), "order")
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		m := <-msgs
		fmt.Println(m.UUID, string(m.Payload))
		m.Ack()
	}
	// Output:
	// 0195a0d1-0000-7000-8000-000000000001 {"step":0}
	// 0195a0d1-0000-7000-8000-000000000002 {"step":1}
}
