package consumer_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestKafkaCloudEvents: a relay with Config.CloudEvents publishes through
// adapters/kafka a record whose headers are exactly the CloudEvents Kafka
// binding's binary content mode (ce_* attributes and content-type, no native
// metadata), keyed by the aggregate id; a consumer subscribed through the
// adapter applies it.
func TestKafkaCloudEvents(t *testing.T) {
	t.Parallel()
	b := newBroker(t, 1)
	store := &runtimetest.MemoryStore{}
	evt := PaidV1{EventVersion: 1, OccurredAt: t0, OrderID: "o-1", Seq: 1}
	env, err := runtime.NewEnvelope(context.Background(), uuid.Must(uuid.NewV7()), evt, "order", "o-1")
	must(t, err)
	store.Add(runtime.OutboxMessage{Topic: b.topic, Envelope: env})

	r, err := relay.New(store, b.publisher(t), relay.Config{CloudEvents: &runtime.CloudEvents{
		Source:         "/orders-service",
		DataSchemaBase: "https://schemas.example.com/outbox",
	}})
	must(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay Run = %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); len(store.Pending()) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not publish within 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling the store, not synchronising
	}

	// The record as it is on the broker.
	reader := kafkago.NewReader(kafkago.ReaderConfig{Brokers: b.addrs, Topic: b.topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer reader.Close()
	readCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := reader.ReadMessage(readCtx)
	must(t, err)
	headers := map[string]string{}
	var names []string
	for _, h := range rec.Headers {
		headers[h.Key] = string(h.Value)
		names = append(names, h.Key)
	}
	want := map[string]string{
		"ce_specversion":   "1.0",
		"ce_id":            env.EventID.String(),
		"ce_source":        "/orders-service",
		"ce_type":          paidType,
		"ce_time":          t0.Format(time.RFC3339Nano),
		"ce_dataschema":    "https://schemas.example.com/outbox/" + paidType + "/v1.schema.json",
		"content-type":     "application/json",
		"ce_eventversion":  "1",
		"ce_partitionkey":  "o-1",
		"ce_aggregatetype": "order",
	}
	if diff := cmp.Diff(want, headers); diff != "" {
		t.Errorf("record headers (-want +got):\n%s", diff)
	}
	if len(names) != len(headers) || !slices.IsSorted(names) {
		t.Errorf("record header names %q: want each once, sorted", names)
	}
	if err := runtimetest.CheckCloudEvent(headers, runtime.CloudEventsPrefixKafka); err != nil {
		t.Error(err)
	}
	if string(rec.Key) != "o-1" || string(rec.Value) != string(env.Payload) {
		t.Errorf("record key %q value %s, want o-1 and %s", rec.Key, rec.Value, env.Payload)
	}

	// A consumer reading through the adapter applies it.
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	onOutcome, res := results()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: onOutcome})
	must(t, consumer.Handle(c, drv, writeEffect("billing")))
	runRouter(t, c, b.subscriber(t, "billing"), b.topic)
	got := next(t, res)
	if got.Outcome != consumer.OutcomeApplied || got.MessageUUID != env.EventID.String() ||
		got.Meta.EventID != env.EventID || got.Meta.EventVersion != 1 || got.Meta.AggregateID != "o-1" || !got.Meta.OccurredAt.Equal(t0) {
		t.Errorf("result %+v: want applied with the envelope of event %s", got, env.EventID)
	}
	if eff := effects(t, db); len(eff) != 1 || eff[0].EventID != env.EventID.String() || eff[0].Currency != "EUR" {
		t.Errorf("effects = %+v", eff)
	}
}
