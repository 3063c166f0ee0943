package sqs_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/sqs"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
)

func TestRoundTrip(t *testing.T) {
	ep := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(ep), CreateQueue: true})
	msg := message.NewMessage("11111111-1111-1111-1111-111111111111", []byte(`{"a":1}`))
	msg.Metadata.Set("aggregate_id", "agg-1")
	msg.Metadata.Set("event_type", "x")
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(ep)})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch)
	got.Ack()
	if got.UUID != msg.UUID || string(got.Payload) != `{"a":1}` || got.Metadata.Get("aggregate_id") != "agg-1" {
		t.Fatalf("got %s %q %v", got.UUID, got.Payload, got.Metadata)
	}
}
