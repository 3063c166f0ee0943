package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/runtime"
)

// TestLag: a group's lag per partition is the records it has yet to
// commit: every record before it consumed any (no committed offset), then
// what remains after it acked some; a group that read nothing of another
// topic is listed only when that topic is named, and an unknown topic is
// an error naming it.
func TestLag(t *testing.T) {
	t.Parallel()
	_, brokers, topic := startCluster(t)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	for i := range 5 {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set(runtime.MetadataAggregateID, "a")
		if err := pub.Publish(topic, m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	group := "group-" + watermill.NewShortUUID()
	sub := newSubscriber(t, testSubscriberConfig(brokers, group))
	ctx := context.Background()

	lag, err := sub.Lag(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(lag) != 1 || lag[0].Topic != topic || lag[0].Partition != 0 || lag[0].Committed != -1 || lag[0].End != 5 || lag[0].Lag != 5 {
		t.Fatalf("lag before the group read = %+v, want 5 on %s/0 with no committed offset", lag, topic)
	}
	if all, err := sub.Lag(ctx); err != nil || len(all) != 0 {
		t.Errorf("lag of every topic the group committed on = %+v, %v; want none yet", all, err)
	}

	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	receiveN(t, ch, 2)
	deadline := time.Now().Add(waitTimeout)
	for {
		lag, err = sub.Lag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(lag) == 1 && lag[0].Committed == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag after two acks = %+v, want offset 2 committed within %v", lag, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling until the deadline
	}
	if lag[0].Topic != topic || lag[0].End != 5 || lag[0].Lag != 3 {
		t.Errorf("lag after two acks = %+v, want 3 of 5", lag)
	}

	if _, err := sub.Lag(ctx, "no-such-topic-"+watermill.NewShortUUID()); !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		t.Errorf("lag of an unknown topic = %v, want UnknownTopicOrPartition", err)
	}
}
