package relay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestCloudEventsMetadata: with Config.CloudEvents the relay publishes each
// message with the CloudEvents binary-mode attributes instead of the native
// metadata, valid under the CloudEvents 1.0 rules; the UUID and payload are
// the same as without.
func TestCloudEventsMetadata(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	sent := newMessage(1, "orders")
	sent.EventVersion = 3
	sent.Headers[runtime.MetadataTraceParent] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	mem.Add(sent)
	pub := &fakePublisher{}
	batches := newBatchRecorder()
	ce := &runtime.CloudEvents{Source: "/orders-service", DataSchemaBase: "https://schemas.example.com/outbox"}
	r, err := relay.New(mem, pub, relay.Config{PollInterval: never, OnBatch: batches.OnBatch, CloudEvents: ce})
	if err != nil {
		t.Fatal(err)
	}
	ce.Source = "changed after New" // the relay keeps its own copy
	start(t, context.Background(), r)
	batches.until(t, func() bool { return len(mem.Pending()) == 0 })

	msgs := pub.Messages()
	if len(msgs) != 1 {
		t.Fatalf("published %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	want := map[string]string{
		"ce_specversion":   "1.0",
		"ce_id":            eventID(1).String(),
		"ce_source":        "/orders-service",
		"ce_type":          "orders.order_placed",
		"ce_time":          "2025-01-02T03:04:05Z",
		"ce_dataschema":    "https://schemas.example.com/outbox/orders.order_placed/v3.schema.json",
		"content-type":     "application/json",
		"ce_eventversion":  "3",
		"ce_partitionkey":  "1",
		"ce_aggregatetype": "order",
		"ce_correlationid": "corr-1",
		"traceparent":      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	}
	if diff := cmp.Diff(want, map[string]string(m.Metadata)); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if err := runtimetest.CheckCloudEvent(m.Metadata, runtime.CloudEventsPrefixKafka); err != nil {
		t.Error(err)
	}
	if m.UUID != eventID(1).String() || string(m.Payload) != string(sent.Payload) {
		t.Errorf("UUID %s payload %s, want %s %s", m.UUID, m.Payload, eventID(1), sent.Payload)
	}
}

func TestCloudEventsConfigValidated(t *testing.T) {
	for _, ce := range []*runtime.CloudEvents{{}, {Source: "/x", DataSchemaBase: "relative/path"}, {Source: "/x", Prefix: "x-"}} {
		_, err := relay.New(&runtimetest.MemoryStore{}, &fakePublisher{}, relay.Config{CloudEvents: ce})
		if !errors.Is(err, relay.ErrInvalidConfig) {
			t.Errorf("CloudEvents %+v: err = %v, want ErrInvalidConfig", *ce, err)
		}
	}
}
