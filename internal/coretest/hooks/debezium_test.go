package hooks_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
)

// TestDebeziumOutboxShape: a row written by the plugin carries every column
// the package documentation maps to Debezium's Outbox Event Router (see
// "Debezium" in the package documentation), non-empty and in the shape the
// router expects: an id, a UUID event id, the route (aggregate type and
// topic), the key (aggregate id), the type, a JSON payload, and headers as
// a JSON object of strings.
func TestDebeziumOutboxShape(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		ctx := runtime.WithCorrelationID(context.Background(), "corr-dbz")
		o := &Order{}
		o.Place(3)
		if err := db.WithContext(ctx).Create(o).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		var r struct {
			ID            int64
			EventID       string
			AggregateType string
			AggregateID   string
			EventType     string
			EventVersion  int
			Topic         string
			Payload       string
			Headers       *string
			OccurredAt    time.Time
		}
		if err := db.Raw(`SELECT id, event_id, aggregate_type, aggregate_id, event_type, event_version, topic, payload, headers, occurred_at
			FROM outbox_messages`).Scan(&r).Error; err != nil {
			t.Fatal(err)
		}
		for col, empty := range map[string]bool{
			"id": r.ID == 0, "event_id (table.field.event.id)": r.EventID == "",
			"aggregate_type (route.by.field)": r.AggregateType == "", "aggregate_id (table.field.event.key)": r.AggregateID == "",
			"event_type (table.field.event.type)": r.EventType == "", "event_version": r.EventVersion == 0,
			"topic": r.Topic == "", "payload (table.field.event.payload)": r.Payload == "",
			"headers": r.Headers == nil || *r.Headers == "", "occurred_at": r.OccurredAt.IsZero(),
		} {
			if empty {
				t.Errorf("column %s is empty in %+v", col, r)
			}
		}
		if _, err := uuid.Parse(r.EventID); err != nil {
			t.Errorf("event_id %q is not a UUID: %v", r.EventID, err)
		}
		if !json.Valid([]byte(r.Payload)) {
			t.Errorf("payload %q is not JSON", r.Payload)
		}
		var h map[string]string
		if r.Headers != nil {
			if err := json.Unmarshal([]byte(*r.Headers), &h); err != nil || h[runtime.MetadataCorrelationID] != "corr-dbz" {
				t.Errorf("headers %q: %v; want a JSON object of strings with the correlation id", *r.Headers, err)
			}
		}
	})
}
