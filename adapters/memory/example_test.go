package memory_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/memory"
)

// Messages published before anyone subscribes are kept, and a subscription
// receives them in publish order.
func ExampleNew() {
	ps, err := memory.New(memory.Config{})
	if err != nil {
		panic(err)
	}
	defer ps.Close()

	for _, payload := range []string{"created", "paid", "shipped"} {
		if err := ps.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(payload))); err != nil {
			panic(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := ps.Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}
	for range 3 {
		msg := <-msgs
		fmt.Println(string(msg.Payload))
		msg.Ack()
	}
	// Output:
	// created
	// paid
	// shipped
}
