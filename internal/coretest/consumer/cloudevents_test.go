package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// ceMessage returns a message carrying only CloudEvents binary-mode
// attributes (Kafka binding prefix), written by hand from the mapping
// table, no native metadata, and a UUID unrelated to the event id.
func ceMessage(id string, md map[string]string, payload string) *message.Message {
	msg := message.NewMessage(uuid.NewString(), message.Payload(payload))
	msg.Metadata = message.Metadata{
		"ce_specversion": "1.0",
		"ce_id":          id,
		"ce_source":      "/orders-service",
		"ce_type":        paidType,
		"content-type":   "application/json",
	}
	for k, v := range md {
		msg.Metadata[k] = v
	}
	return msg
}

// TestCloudEventsOnlyMessage: a message with only the ce_* attributes is
// decoded (version from ce_eventversion, or from the payload without it),
// upcast, applied with the envelope rebuilt from the attributes, and
// deduplicated on ce_id by the inbox.
func TestCloudEventsOnlyMessage(t *testing.T) {
	t.Parallel()
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: o.record})
	var metas []consumer.Meta
	must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		metas = append(metas, m)
		return writeEffect("billing")(ctx, tx, e, m)
	}))

	id := "01900000-0000-7000-8000-000000000042"
	msg := ceMessage(id, map[string]string{
		"ce_time":          "2026-03-01T12:00:00.5Z",
		"ce_eventversion":  "1",
		"ce_partitionkey":  "o-1",
		"ce_aggregatetype": "order",
		"ce_correlationid": "corr-7",
	}, `{"event_version":1,"occurred_at":"2026-03-01T12:00:00.5Z","order_id":"o-1","seq":4}`)
	if err := c.HandlerFunc()(msg); err != nil {
		t.Fatal(err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeApplied {
		t.Fatalf("outcome %+v, want applied", r)
	}
	m := metas[0]
	switch {
	case m.EventID.String() != id, m.EventType != paidType, m.EventVersion != 1,
		!m.OccurredAt.Equal(time.Date(2026, 3, 1, 12, 0, 0, 5e8, time.UTC)),
		m.AggregateType != "order", m.AggregateID != "o-1",
		m.Headers[runtime.MetadataCorrelationID] != "corr-7",
		m.Headers["ce_source"] != "/orders-service":
		t.Errorf("Meta = %+v", m)
	}
	eff := effects(t, db)
	if len(eff) != 1 || eff[0].Currency != "EUR" || eff[0].Seq != 4 || eff[0].EventID != id {
		t.Errorf("effects = %+v, want one upcast v1 event %s", eff, id)
	}

	// The same event again, under another transport UUID: the inbox
	// recognises it by ce_id.
	if err := c.HandlerFunc()(ceMessage(id, map[string]string{"ce_eventversion": "1"}, string(msg.Payload))); err != nil {
		t.Fatal(err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeDuplicate {
		t.Errorf("redelivery outcome %+v, want duplicate", r)
	}

	// Another producer's event: a non-UUID id and no eventversion; the
	// version comes from the payload.
	foreign := ceMessage("invoice-9", nil, `{"event_version":2,"occurred_at":"2026-03-01T12:00:00Z","order_id":"o-2","seq":1,"currency":"USD"}`)
	if err := c.HandlerFunc()(foreign); err != nil {
		t.Fatal(err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeApplied || r.Meta.EventVersion != 2 {
		t.Errorf("foreign event: %+v, want applied v2", r)
	}

	// A CloudEvent without a required attribute is malformed.
	bad := ceMessage("01900000-0000-7000-8000-000000000043", map[string]string{"ce_eventversion": "2"}, string(foreign.Payload))
	delete(bad.Metadata, "ce_source")
	if err := c.HandlerFunc()(bad); err == nil {
		t.Error("a CloudEvent without ce_source was acked")
	} else if want := "consumer: billing: message " + bad.UUID + ": failed: "; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), uuid.Nil.String()) {
		// It named "event 00000000-0000-0000-0000-000000000000 ( v0)"
		// (a new user's trial), which the router logs.
		t.Errorf("malformed message's error %q; want it to name the message, %q", err, want)
	}
	if r := o.last(); r.Reason != consumer.ReasonMalformed {
		t.Errorf("without ce_source: %+v, want malformed", r)
	}
	if n := len(effects(t, db)); n != 2 {
		t.Errorf("effects = %d, want 2", n)
	}
}
