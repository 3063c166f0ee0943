package tracing_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/tracing"
	"github.com/gooutbox/outbox/adapters/tracing/tracingtest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// TestStartHandler: with consumer.Config.StartHandler, every handler call
// of an inbox handler (the path consumer.Consumer.Run's batches take too)
// runs in a CONSUMER span that is a child of the message's traceparent,
// and a failed call ends its span with an error.
func TestStartHandler(t *testing.T) {
	ctx := t.Context()
	tp, exp := tracingtest.New()
	tr, err := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka"})
	if err != nil {
		t.Fatal(err)
	}
	drv, err := hooks.NewDriver(hookstest.SQLite(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Migrate(ctx, drv, ""); err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(newRegistry(t), consumer.Config{Name: "billing", DB: drv, StartHandler: tr.StartHandler,
		MaxRetries: 1, MinBackoff: 1, MaxBackoff: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var inHandler []trace.SpanContext
	fail := true
	err = consumer.Handle(c, drv, func(ctx context.Context, _ *gorm.DB, _ OrderPlaced, _ consumer.Meta) error {
		inHandler = append(inHandler, trace.SpanContextFromContext(ctx))
		if fail {
			fail = false
			return errors.New("ledger locked")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A message as the relay publishes it, under a producer span.
	_, producer := tp.Tracer("producer").Start(ctx, "send")
	producer.End()
	evt := OrderPlaced{EventVersion: 1, OccurredAt: time.Now().UTC(), Amount: 9.5}
	env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), evt, "order", "o-1")
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
	for k, v := range env.Metadata() {
		msg.Metadata.Set(k, v)
	}
	tr.Headers(trace.ContextWithSpan(ctx, producer), msg.Metadata)
	if err := c.HandlerFunc()(msg); err != nil {
		t.Fatalf("handler: %v", err)
	}

	var (
		process  []trace.SpanContext
		statuses []codes.Code
	)
	for _, s := range exp.GetSpans() {
		if s.Name != "process" {
			continue
		}
		process = append(process, s.SpanContext)
		statuses = append(statuses, s.Status.Code)
		if s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("span kind %v, want consumer", s.SpanKind)
		}
		if s.Parent.SpanID() != producer.SpanContext().SpanID() || !s.Parent.IsRemote() {
			t.Errorf("process span parent = %v, want the remote producer span %v", s.Parent, producer.SpanContext())
		}
		if a := attrs(s.Attributes); a["messaging.message.id"] != env.EventID.String() || a["outbox.event.type"] != placedType {
			t.Errorf("process span attributes = %v", a)
		}
	}
	spans := exp.GetSpans()
	if len(process) != 2 || len(inHandler) != 2 {
		b, _ := json.Marshal(spans)
		t.Fatalf("%d process spans and %d handler calls, want 2 of each (a failed try, then success): %s", len(process), len(inHandler), b)
	}
	for i := range process {
		if !inHandler[i].Equal(process[i]) {
			t.Errorf("handler call %d saw span %v, want its process span %v", i, inHandler[i], process[i])
		}
	}
	if statuses[0] != codes.Error || statuses[1] == codes.Error {
		t.Errorf("process span statuses = %v, want Error (the handler failed), then not", statuses)
	}
}
