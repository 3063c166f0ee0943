package amqp_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/amqp"
)

// TestMarshalerNonStringHeaders: headers the broker adds (a quorum queue's
// integer x-delivery-count) become metadata instead of failing the message.
func TestMarshalerNonStringHeaders(t *testing.T) {
	d := amqp091.Delivery{
		Headers: amqp091.Table{
			"_watermill_message_uuid": "0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b",
			"event_type":              "order.placed",
			"x-delivery-count":        int64(2),
			"x-small":                 int32(-3),
			"x-bytes":                 []byte("raw"),
			"x-bool":                  true,
		},
		Body: []byte("{}"),
	}
	msg, err := amqp.Marshaler{}.Unmarshal(d)
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if msg.UUID != "0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b" {
		t.Errorf("UUID = %q", msg.UUID)
	}
	want := map[string]string{
		"event_type":       "order.placed",
		"x-delivery-count": "2",
		"x-small":          "-3",
		"x-bytes":          "raw",
		"x-bool":           "true",
	}
	if diff := cmp.Diff(want, map[string]string(msg.Metadata)); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if _, ok := d.Headers["x-delivery-count"].(int64); !ok {
		t.Error("Unmarshal modified the delivery's headers")
	}
}

// TestMarshalerRoundTrip: what Marshal writes, Unmarshal reads, with the
// UUID and metadata, and delivery mode persistent.
func TestMarshalerRoundTrip(t *testing.T) {
	msg := newEvent("agg-1", 7)
	pub, err := amqp.Marshaler{}.Marshal(msg)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if pub.DeliveryMode != amqp091.Persistent {
		t.Errorf("DeliveryMode = %d, want persistent", pub.DeliveryMode)
	}
	got, err := amqp.Marshaler{}.Unmarshal(amqp091.Delivery{Headers: pub.Headers, Body: pub.Body})
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if got.UUID != msg.UUID || string(got.Payload) != string(msg.Payload) {
		t.Errorf("Unmarshal = %s %s, want %s %s", got.UUID, got.Payload, msg.UUID, msg.Payload)
	}
	if diff := cmp.Diff(msg.Metadata, got.Metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
}
