package runtime_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

func ceEnvelope() runtime.Envelope {
	return runtime.Envelope{
		EventID:       uuid.MustParse("01900000-0000-7000-8000-000000000001"),
		EventType:     "orders.order_placed",
		EventVersion:  2,
		AggregateType: "order",
		AggregateID:   "o-1",
		OccurredAt:    time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC),
		Headers: map[string]string{
			runtime.MetadataCorrelationID:    "corr-1",
			runtime.MetadataTraceParent:      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			runtime.MetadataMinReaderVersion: "1",
			"x-custom":                       "kept",
		},
		Payload: []byte(`{"event_version":2}`),
	}
}

// TestCloudEventsMetadata: the binary-mode metadata of an envelope, key by
// key (relay and Kafka tests check it against the CloudEvents 1.0 rules with
// runtimetest.CheckCloudEvent).
func TestCloudEventsMetadata(t *testing.T) {
	ce := runtime.CloudEvents{Source: "/orders-service", DataSchemaBase: "https://schemas.example.com/events/"}
	got := ce.Metadata(ceEnvelope())
	want := map[string]string{
		"ce_specversion":      "1.0",
		"ce_id":               "01900000-0000-7000-8000-000000000001",
		"ce_source":           "/orders-service",
		"ce_type":             "orders.order_placed",
		"ce_time":             "2026-01-02T03:04:05.123456Z",
		"ce_dataschema":       "https://schemas.example.com/events/orders.order_placed/v2.schema.json",
		"content-type":        "application/json",
		"ce_eventversion":     "2",
		"ce_partitionkey":     "o-1",
		"ce_aggregatetype":    "order",
		"ce_minreaderversion": "1",
		"ce_correlationid":    "corr-1",
		"traceparent":         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"x-custom":            "kept",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	ce.DataSchemaBase = ""
	if _, ok := ce.Metadata(ceEnvelope())["ce_dataschema"]; ok {
		t.Error("dataschema written without DataSchemaBase")
	}
}

// TestCloudEventsRoundTrip: EnvelopeFromMetadata reads what Metadata
// writes, under every binding prefix; attributes that are not envelope
// fields stay in Headers.
func TestCloudEventsRoundTrip(t *testing.T) {
	for _, p := range []string{"", runtime.CloudEventsPrefixHTTP, runtime.CloudEventsPrefixAMQP, runtime.CloudEventsPrefixAMQPJMS} {
		ce := runtime.CloudEvents{Source: "https://example.com/orders", DataSchemaBase: "https://schemas.example.com", Prefix: p}
		if err := ce.Validate(); err != nil {
			t.Fatal(err)
		}
		if p == "" {
			p = runtime.CloudEventsPrefixKafka
		}
		sent := ceEnvelope()
		got, err := runtime.EnvelopeFromMetadata("ignored", ce.Metadata(sent), sent.Payload)
		if err != nil {
			t.Fatalf("prefix %q: %v", p, err)
		}
		want := sent
		want.Headers = map[string]string{
			runtime.MetadataCorrelationID:    "corr-1",
			runtime.MetadataTraceParent:      sent.Headers[runtime.MetadataTraceParent],
			runtime.MetadataMinReaderVersion: "1",
			"x-custom":                       "kept",
			p + "source":                     "https://example.com/orders",
			p + "specversion":                "1.0",
			p + "dataschema":                 "https://schemas.example.com/orders.order_placed/v2.schema.json",
			"content-type":                   "application/json",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("prefix %q: envelope (-want +got):\n%s", p, diff)
		}
	}
}

// TestEnvelopeFromForeignCloudEvent: a CloudEvent of another producer, with
// only the required attributes and a non-UUID id, gets its version from the
// payload and a stable name-based event id.
func TestEnvelopeFromForeignCloudEvent(t *testing.T) {
	md := map[string]string{"ce_specversion": "1.0", "ce_id": "A234-1234", "ce_source": "/billing", "ce_type": "orders.order_placed"}
	env, err := runtime.EnvelopeFromMetadata("", md, []byte(`{"event_version":3,"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if env.EventType != "orders.order_placed" || env.EventVersion != 3 {
		t.Errorf("key = %s, want orders.order_placed v3", env.Key())
	}
	if want := uuid.NewSHA1(uuid.NameSpaceURL, []byte("/billing#A234-1234")); env.EventID != want {
		t.Errorf("EventID = %s, want %s", env.EventID, want)
	}
	if !env.OccurredAt.IsZero() || env.AggregateID != "" {
		t.Errorf("OccurredAt %v, AggregateID %q: want zero values", env.OccurredAt, env.AggregateID)
	}

	for name, edit := range map[string]func(map[string]string){
		"no source":         func(m map[string]string) { delete(m, "ce_source") },
		"no id":             func(m map[string]string) { m["ce_id"] = "" },
		"specversion 2.0":   func(m map[string]string) { m["ce_specversion"] = "2.0" },
		"bad time":          func(m map[string]string) { m["ce_time"] = "yesterday" },
		"bad eventversion":  func(m map[string]string) { m["ce_eventversion"] = "0" },
		"no version at all": func(m map[string]string) { m["ce_eventversion"] = "x" },
		"native without type": func(m map[string]string) {
			clear(m)
			m[runtime.MetadataEventVersion] = "1"
		},
	} {
		m := map[string]string{}
		for k, v := range md {
			m[k] = v
		}
		edit(m)
		if _, err := runtime.EnvelopeFromMetadata("", m, []byte(`{"event_version":1}`)); !errors.Is(err, runtime.ErrInvalidEnvelope) {
			t.Errorf("%s: err = %v, want ErrInvalidEnvelope", name, err)
		}
	}
	if _, err := runtime.EnvelopeFromMetadata("", md, []byte(`{}`)); !errors.Is(err, runtime.ErrInvalidEnvelope) {
		t.Errorf("no version in attributes or payload: err = %v, want ErrInvalidEnvelope", err)
	}
}

// TestEnvelopeFromMetadataPrefersNative: with both native keys and
// CloudEvents attributes, the native keys are read.
func TestEnvelopeFromMetadataPrefersNative(t *testing.T) {
	env := ceEnvelope()
	md := runtime.CloudEvents{Source: "/x"}.Metadata(env)
	for k, v := range env.Metadata() {
		md[k] = v
	}
	md["ce_type"] = "other.type"
	got, err := runtime.EnvelopeFromMetadata("", md, env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.EventType != env.EventType {
		t.Errorf("EventType = %q, want the native %q", got.EventType, env.EventType)
	}
}

func TestCloudEventsValidate(t *testing.T) {
	for _, c := range []runtime.CloudEvents{
		{},
		{Source: "%zz"},
		{Source: "/x", DataSchemaBase: "/relative"},
		{Source: "/x", Prefix: "CE_"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	for _, c := range []runtime.CloudEvents{
		{Source: "/x"},
		{Source: "urn:example:orders", DataSchemaBase: "https://s.example.com/v", Prefix: runtime.CloudEventsPrefixAMQP},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestAggregateOf(t *testing.T) {
	env := ceEnvelope()
	for name, md := range map[string]map[string]string{
		"native":      env.Metadata(),
		"cloudevents": runtime.CloudEvents{Source: "/x"}.Metadata(env),
		"amqp":        runtime.CloudEvents{Source: "/x", Prefix: runtime.CloudEventsPrefixAMQP}.Metadata(env),
	} {
		if typ, id := runtime.AggregateOf(md); typ != "order" || id != "o-1" {
			t.Errorf("%s: AggregateOf = %q, %q", name, typ, id)
		}
	}
	if _, id := runtime.AggregateOf(map[string]string{}); id != "" {
		t.Errorf("empty metadata: id %q", id)
	}
}

// TestForeignCloudEventPayloadGetsVersionAndTime: another producer's event
// that carries its version and time only as attributes gets them in its
// payload too, since the event structs require event_version and
// occurred_at (it failed to decode: found by a new user's trial); a payload
// that has them keeps them.
func TestForeignCloudEventPayloadGetsVersionAndTime(t *testing.T) {
	md := map[string]string{"ce_specversion": "1.0", "ce_id": "b-7", "ce_source": "/billing", "ce_type": "orders.order_paid",
		"ce_eventversion": "2", "ce_time": "2026-12-02T10:00:00.5Z"}
	env, err := runtime.EnvelopeFromMetadata("", md, []byte(`{"total":"2.00","channel":"app"}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(env.Payload, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"total": "2.00", "channel": "app", "event_version": float64(2), "occurred_at": "2026-12-02T10:00:00.5Z"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	own := `{"event_version":2,"occurred_at":"2026-12-01T00:00:00Z","total":"1"}`
	if env, err = runtime.EnvelopeFromMetadata("", md, []byte(own)); err != nil || string(env.Payload) != own {
		t.Errorf("a payload with both fields became %s, %v", env.Payload, err)
	}
}
