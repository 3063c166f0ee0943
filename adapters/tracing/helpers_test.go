package tracing_test

import (
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/gooutbox/outbox/runtime"
)

// OrderPlaced is the event of the tests.
type OrderPlaced struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Amount       float64   `json:"amount"`
}

const placedType = "orders.order_placed"

func (OrderPlaced) EventKey() runtime.Key  { return runtime.Key{Type: placedType, Version: 1} }
func (e OrderPlaced) EventTime() time.Time { return e.OccurredAt }
func (OrderPlaced) Validate() error        { return nil }

// Order is the aggregate of the tests; its events go to topic "order".
type Order struct {
	ID     int64 `gorm:"primaryKey"`
	Amount float64
	runtime.Recorder
}

func (o *Order) Place(amount float64) {
	o.Amount = amount
	o.Record(OrderPlaced{EventVersion: 1, OccurredAt: time.Now().UTC(), Amount: amount})
}

func newRegistry(t testing.TB) *runtime.Registry {
	t.Helper()
	reg := runtime.NewRegistry()
	err := reg.Register(OrderPlaced{}.EventKey(), 1, func(p []byte) (runtime.Event, error) {
		var e OrderPlaced
		err := json.Unmarshal(p, &e)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// spanNamed returns the one ended span named name, failing t when there is
// not exactly one.
func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("%d spans named %q, want 1; spans: %q", len(found), name, names)
	}
	return found[0]
}

// attrs returns a span's attributes as a map of their values' strings.
func attrs(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// traceParent returns the W3C traceparent of a sampled span context.
func traceParent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}
