package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/nats"
)

func TestDebugNack(t *testing.T) {
	_, js := connect(t)
	prefix := streamPrefix(t, js)
	stream := nats.StreamConfig{Prefix: prefix}
	pub := newPublisher(t, nats.PublisherConfig{Stream: stream})
	for i := 0; i < 50; i++ {
		if err := pub.Publish("dbg", message.NewMessage(fmt.Sprint(i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	info := func(w string) {
		c, err := js.Consumer(context.Background(), nats.StreamName(prefix, "dbg"), nats.ConsumerName("g"))
		if err != nil {
			t.Fatal(err)
		}
		ci := c.CachedInfo()
		t.Logf("%s: pending=%d ackpending=%d waiting=%d redelivered=%d delivered=%+v floor=%+v", w, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.NumRedelivered, ci.Delivered, ci.AckFloor)
	}
	for k := 0; k < 3; k++ {
		sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: "g", Stream: stream, AckWait: 3 * time.Second})
		ch, err := sub.Subscribe(context.Background(), "dbg")
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 100; j++ {
			select {
			case m := <-ch:
				m.Nack()
			case <-time.After(5 * time.Second):
				info("stall")
				t.Fatalf("timeout at %d", j)
			}
		}
		sub.Close()
		info("closed")
	}
	sub := newSubscriber(t, nats.SubscriberConfig{ConsumerGroup: "g", Stream: stream, AckWait: 3 * time.Second})
	ch, err := sub.Subscribe(context.Background(), "dbg")
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < 50; j++ {
		select {
		case m := <-ch:
			t.Logf("got %s", m.UUID)
			m.Ack()
		case <-time.After(8 * time.Second):
			info("stall")
			t.Fatalf("timeout at %d", j)
		}
	}
}
