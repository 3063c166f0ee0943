package amqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/amqp"
)

// TestPublishPastItsDeadlineNeverReachesTheBroker: a publish whose frames
// are written after the deadline of its messages' context (a relay paused
// mid-publish that wakes after its lease ended: here the fence's clock is
// an hour ahead) is refused at the connection, so the broker never gets
// it; the connection is dropped, and the next publish, on time, goes out
// on a new one.
func TestPublishPastItsDeadlineNeverReachesTheBroker(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	topic := newTopic(t, url)
	cfg := testConfig(t)
	cfg.Logger = testLogger()
	pub, err := amqp.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(topic, message.NewMessage("first", []byte("1"))); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	amqp.SetGateClock(pub, func() time.Time { return time.Now().Add(time.Hour) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	late := message.NewMessage("late", []byte("2"))
	late.SetContext(ctx)
	err = pub.Publish(topic, late)
	if !errors.Is(err, amqp.ErrUnconfirmed) {
		t.Fatalf("Publish past its deadline = %v, want ErrUnconfirmed (fenced)", err)
	}
	if err := pub.Publish(topic, message.NewMessage("next", []byte("3"))); err != nil {
		t.Fatalf("Publish after a fenced one: %v", err)
	}
	if n := queueDepth(t, url, topic); n != 2 {
		t.Errorf("the queue holds %d messages, want 2 (first, next): the late publish reached the broker", n)
	}
}
