package tracing_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/adapters/tracing"
	"github.com/gooutbox/outbox/adapters/tracing/tracingtest"
	"github.com/gooutbox/outbox/runtime"
)

// TestAttributesFromEitherMetadataForm: the send and process spans carry
// the event's type, version and aggregate whether the message's metadata
// holds the native keys or CloudEvents attributes (relay.Config.CloudEvents,
// under any binding prefix). With CloudEvents they were missing: only the
// native keys were read.
func TestAttributesFromEitherMetadataForm(t *testing.T) {
	env, err := runtime.NewEnvelope(t.Context(), runtime.NewEventID(),
		OrderPlaced{EventVersion: 1, OccurredAt: time.Now().UTC(), Amount: 9.5}, "order", "o-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		string(tracing.AttrEventType):     placedType,
		string(tracing.AttrEventVersion):  "1",
		string(tracing.AttrAggregateType): "order",
		string(tracing.AttrAggregateID):   "o-1",
	}
	for _, tc := range []struct {
		name string
		md   map[string]string
	}{
		{"native", env.Metadata()},
		{"cloudevents ce_", runtime.CloudEvents{Source: "/orders"}.Metadata(env)},
		{"cloudevents ce-", runtime.CloudEvents{Source: "/orders", Prefix: runtime.CloudEventsPrefixHTTP}.Metadata(env)},
		{"cloudevents cloudEvents:", runtime.CloudEvents{Source: "/orders", Prefix: runtime.CloudEventsPrefixAMQP}.Metadata(env)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The runtime reads this metadata as the same envelope.
			dec, err := runtime.EnvelopeFromMetadata(env.EventID.String(), tc.md, env.Payload)
			if err != nil {
				t.Fatal(err)
			}
			decoded := map[string]string{
				string(tracing.AttrEventType): dec.EventType, string(tracing.AttrEventVersion): strconv.Itoa(dec.EventVersion),
				string(tracing.AttrAggregateType): dec.AggregateType, string(tracing.AttrAggregateID): dec.AggregateID,
			}
			if diff := cmp.Diff(want, decoded); diff != "" {
				t.Fatalf("runtime.EnvelopeFromMetadata (-want +got):\n%s", diff)
			}
			tp, exp := tracingtest.New()
			tr, err := tracing.New(tracing.Config{TracerProvider: tp})
			if err != nil {
				t.Fatal(err)
			}
			msg := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
			msg.Metadata = message.Metadata(tc.md)
			if err := tr.Publisher(&flakyPublisher{}).Publish("order", msg); err != nil {
				t.Fatal(err)
			}
			if err := tr.Handler(func(*message.Message) error { return nil })(msg); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"send order", "process"} {
				got := attrs(spanNamed(t, exp.GetSpans(), name).Attributes)
				outboxOnly(got)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s span outbox attributes (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// TestAttributesFromPartialMetadata: metadata that is not a whole envelope
// in either form still gives the attributes of the keys it has.
func TestAttributesFromPartialMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   map[string]string
		want map[string]string
	}{
		{"native type only", map[string]string{runtime.MetadataEventType: placedType},
			map[string]string{string(tracing.AttrEventType): placedType}},
		{"native aggregate, bad version", map[string]string{runtime.MetadataAggregateType: "order", runtime.MetadataAggregateID: "o-1",
			runtime.MetadataEventVersion: "x"},
			map[string]string{string(tracing.AttrAggregateType): "order", string(tracing.AttrAggregateID): "o-1"}},
		// No source: not a CloudEvent the runtime reads, but its attributes are there.
		{"cloudevents without source", map[string]string{"ce_specversion": "1.0", "ce_id": "1", "ce_type": placedType,
			"ce_eventversion": "2", "ce_partitionkey": "o-1"},
			map[string]string{string(tracing.AttrEventType): placedType, string(tracing.AttrEventVersion): "2",
				string(tracing.AttrAggregateID): "o-1"}},
		{"none", map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, exp := tracingtest.New()
			tr, err := tracing.New(tracing.Config{TracerProvider: tp})
			if err != nil {
				t.Fatal(err)
			}
			msg := message.NewMessage("m-1", nil)
			msg.Metadata = message.Metadata(tc.md)
			if err := tr.Handler(func(*message.Message) error { return nil })(msg); err != nil {
				t.Fatal(err)
			}
			got := attrs(spanNamed(t, exp.GetSpans(), "process").Attributes)
			outboxOnly(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("process span outbox attributes (-want +got):\n%s", diff)
			}
		})
	}
}

// outboxOnly deletes from a span's attributes all but the outbox.* ones
// (the messaging conventions' are tested elsewhere).
func outboxOnly(attrs map[string]string) {
	for k := range attrs {
		if !strings.HasPrefix(k, "outbox.") {
			delete(attrs, k)
		}
	}
}
