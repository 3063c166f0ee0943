package tracing_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/adapters/tracing"
	"github.com/gooutbox/outbox/adapters/tracing/tracingtest"
)

// The three decorators by hand: what hooks.Config.Headers writes into an
// outbox row, what the relay's publisher sends, what a consumer's handler
// sees. (TestEndToEnd runs the same with GORM, the relay and a consumer.)
func ExampleNew() {
	tp, spans := tracingtest.New() // in production: the SDK with an exporter
	defer tp.Shutdown(context.Background())
	tr, err := tracing.New(tracing.Config{TracerProvider: tp, System: "memory"})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The save: hooks.Config{Headers: tr.Headers} stores the span context of
	// the save's ctx with the event; the relay copies it into the metadata.
	ctx, save := tp.Tracer("app").Start(context.Background(), "POST /orders")
	msg := message.NewMessage("0190a5e0-0000-7000-8000-000000000001", []byte(`{"amount":12.5}`))
	tr.Headers(ctx, msg.Metadata)
	save.End()

	// The relay publishes through the decorator.
	broker, _ := memory.New(memory.Config{})
	defer broker.Close()
	if err := tr.Publisher(broker).Publish("order", msg); err != nil {
		fmt.Println(err)
		return
	}

	// The consumer's handler, decorated.
	received, _ := broker.Subscribe(context.Background(), "order")
	handler := tr.Handler(func(m *message.Message) error {
		fmt.Println("handler has a span:", trace.SpanContextFromContext(m.Context()).IsValid())
		return nil
	})
	m := <-received
	_ = handler(m)
	m.Ack()

	for _, s := range spans.GetSpans() {
		fmt.Printf("%s (%s), links: %d\n", s.Name, s.SpanKind, len(s.Links))
	}
	// Output:
	// handler has a span: true
	// POST /orders (internal), links: 0
	// send order (producer), links: 1
	// process (consumer), links: 0
}
