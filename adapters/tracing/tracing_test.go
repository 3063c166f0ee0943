package tracing_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/adapters/tracing"
	"github.com/gooutbox/outbox/adapters/tracing/tracingtest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestEndToEnd follows one event from a GORM save under a span, through the
// outbox row, the real relay and the memory broker, to a consumer's typed
// handler, and checks every span and link on the way.
func TestEndToEnd(t *testing.T) {
	ctx := t.Context()
	tp, exp := tracingtest.New()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := tracing.New(tracing.Config{TracerProvider: tp, System: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)

	// The database, the relay and the broker.
	db := hookstest.SQLite(t, nil)
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ps, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	rl, err := relay.New(store, tr.Publisher(ps), relay.Config{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := hooks.New(hooks.Config{Headers: tr.Headers, AfterCommit: rl.Notify})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(plugin); err != nil {
		t.Fatal(err)
	}

	// The consumer, in a router, with the handler decorated.
	type seen struct {
		span trace.SpanContext
		meta consumer.Meta
	}
	handled := make(chan seen, 1)
	c, err := consumer.New(newRegistry(t), consumer.Config{Name: "billing", Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	err = consumer.HandleWithoutInbox(c, func(ctx context.Context, e OrderPlaced, m consumer.Meta) error {
		handled <- seen{trace.SpanContextFromContext(ctx), m}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddConsumerHandler("billing", "order", ps, tr.Handler(c.HandlerFunc()))

	runCtx, cancel := context.WithCancel(ctx)
	relayDone, routerDone := make(chan error, 1), make(chan error, 1)
	go func() { relayDone <- rl.Run(runCtx) }()
	go func() { routerDone <- router.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
		if err := <-routerDone; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	<-router.Running()

	// The save, under the application's span.
	appCtx, appSpan := tp.Tracer("app").Start(ctx, "place order")
	order := &Order{}
	order.Place(12.5)
	if err := db.WithContext(appCtx).Create(order).Error; err != nil {
		t.Fatal(err)
	}
	appSpan.End()
	app := appSpan.SpanContext()

	// The row stores the save's span context.
	var headers string
	if err := sqlDB.QueryRowContext(ctx, "SELECT headers FROM "+sqlstore.DefaultTable).Scan(&headers); err != nil {
		t.Fatal(err)
	}
	var rowHeaders map[string]string
	if err := json.Unmarshal([]byte(headers), &rowHeaders); err != nil {
		t.Fatalf("headers column %q: %v", headers, err)
	}
	if got, want := rowHeaders[runtime.MetadataTraceParent], traceParent(app); got != want {
		t.Fatalf("row header traceparent = %q, want the save's span %q", got, want)
	}

	var got seen
	select {
	case got = <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not called within 30 s")
	}
	// The process span ends after the handler returns: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for len(exp.GetSpans()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	spans := exp.GetSpans()
	send := spanNamed(t, spans, "send order")
	process := spanNamed(t, spans, "process order")
	eventID := got.meta.EventID.String()

	// The send span: a producer span of its own trace, linked to the save.
	if send.SpanKind != trace.SpanKindProducer {
		t.Errorf("send span kind = %v, want producer", send.SpanKind)
	}
	if send.Parent.IsValid() {
		t.Errorf("send span has parent %v, want none (a trace of its own, linked to the save)", send.Parent)
	}
	if len(send.Links) != 1 || !send.Links[0].SpanContext.Equal(app.WithRemote(true)) {
		t.Errorf("send span links = %+v, want one link to the save's span %v", send.Links, app)
	}
	if send.SpanContext.TraceID() == app.TraceID() {
		t.Error("send span is in the save's trace, want a trace of its own")
	}
	wantSend := map[string]string{
		"messaging.system":            "memory",
		"messaging.destination.name":  "order",
		"messaging.operation.type":    "send",
		"messaging.operation.name":    "send",
		"messaging.message.id":        eventID,
		"messaging.message.body.size": "", // checked below
		"outbox.event.type":           placedType,
		"outbox.event.version":        "1",
		"outbox.aggregate.type":       "order",
		"outbox.aggregate.id":         "1",
	}
	gotSend := attrs(send.Attributes)
	if gotSend["messaging.message.body.size"] == "" || gotSend["messaging.message.body.size"] == "0" {
		t.Errorf("messaging.message.body.size = %q, want the payload's size", gotSend["messaging.message.body.size"])
	}
	wantSend["messaging.message.body.size"] = gotSend["messaging.message.body.size"]
	if diff := cmp.Diff(wantSend, gotSend); diff != "" {
		t.Errorf("send span attributes (-want +got):\n%s", diff)
	}
	if send.Status.Code != codes.Unset {
		t.Errorf("send span status = %v, want unset", send.Status)
	}

	// The process span: a consumer span, child of the send span, in the
	// handler's context.
	if process.SpanKind != trace.SpanKindConsumer {
		t.Errorf("process span kind = %v, want consumer", process.SpanKind)
	}
	if process.Parent.SpanID() != send.SpanContext.SpanID() || process.Parent.TraceID() != send.SpanContext.TraceID() {
		t.Errorf("process span parent = %v, want the send span %v", process.Parent, send.SpanContext)
	}
	if !got.span.Equal(process.SpanContext) {
		t.Errorf("the handler's span = %v, want the process span %v", got.span, process.SpanContext)
	}
	wantProcess := maps(wantSend, map[string]string{"messaging.operation.type": "process", "messaging.operation.name": "process"})
	if diff := cmp.Diff(wantProcess, attrs(process.Attributes)); diff != "" {
		t.Errorf("process span attributes (-want +got):\n%s", diff)
	}
}

// maps returns a copy of base with over's entries set.
func maps(base, over map[string]string) map[string]string {
	m := make(map[string]string, len(base))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// flakyPublisher fails its first call, and records the metadata of what it
// published.
type flakyPublisher struct {
	calls int
	errs  error // returned by the first call
	got   [][]*message.Message
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.calls++
	p.got = append(p.got, msgs)
	if p.calls == 1 {
		return p.errs
	}
	return nil
}

func (p *flakyPublisher) Close() error { return nil }

// TestPublishAgainLinksToTheEvent: a message published a second time (the
// relay's retry within a batch) links to the event's span context, not to
// the first attempt's send span; the caller's message is left unchanged;
// the failed attempt's span has an error status.
func TestPublishAgainLinksToTheEvent(t *testing.T) {
	tp, exp := tracingtest.New()
	tr, err := tracing.New(tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	_, app := tp.Tracer("app").Start(t.Context(), "save")
	app.End()
	md := map[string]string{}
	tr.Headers(trace.ContextWithSpan(t.Context(), app), md)

	msg := message.NewMessage("0190a5e0-0000-7000-8000-000000000001", []byte(`{}`))
	msg.Metadata = message.Metadata(md)
	before := maps(md, nil)
	fp := &flakyPublisher{errs: errors.New("broker down")}
	pub := tr.Publisher(fp)
	if err := pub.Publish("order", msg); err == nil {
		t.Fatal("first Publish = nil, want the publisher's error")
	}
	if err := pub.Publish("order", msg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, map[string]string(msg.Metadata)); diff != "" {
		t.Errorf("the caller's metadata changed (-before +after):\n%s", diff)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 { // save, and two sends
		t.Fatalf("%d spans, want 3", len(spans))
	}
	for i, s := range spans[1:] {
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != app.SpanContext().SpanID() {
			t.Errorf("attempt %d links = %+v, want one link to the event's span", i+1, s.Links)
		}
		// What went out carries this attempt's send span.
		if got, want := fp.got[i][0].Metadata.Get("traceparent"), traceParent(s.SpanContext); got != want {
			t.Errorf("attempt %d published traceparent %q, want its send span's %q", i+1, got, want)
		}
		if got := trace.SpanContextFromContext(fp.got[i][0].Context()); !got.Equal(s.SpanContext) {
			t.Errorf("attempt %d message context holds span %v, want its send span", i+1, got)
		}
	}
	if spans[1].Status.Code != codes.Error || spans[1].Status.Description != "broker down" {
		t.Errorf("failed attempt status = %+v, want Error \"broker down\"", spans[1].Status)
	}
	if spans[2].Status.Code != codes.Unset {
		t.Errorf("second attempt status = %+v, want unset", spans[2].Status)
	}
}

// TestPublishErrorsPerMessage: with one error per message, only the failed
// messages' spans have an error status.
func TestPublishErrorsPerMessage(t *testing.T) {
	tp, exp := tracingtest.New()
	tr, err := tracing.New(tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	fp := &flakyPublisher{errs: runtime.PublishErrors{nil, errors.New("too large"), nil}}
	msgs := []*message.Message{
		message.NewMessage("a", nil), message.NewMessage("b", nil), message.NewMessage("c", nil),
	}
	if err := tr.Publisher(fp).Publish("t", msgs...); err == nil {
		t.Fatal("Publish = nil, want the per-message errors")
	}
	var got []string
	for _, s := range exp.GetSpans() {
		got = append(got, attrs(s.Attributes)["messaging.message.id"]+":"+s.Status.Code.String())
	}
	if diff := cmp.Diff([]string{"a:Unset", "b:Error", "c:Unset"}, got); diff != "" {
		t.Errorf("span statuses (-want +got):\n%s", diff)
	}
}

// TestMiddleware: the router middleware starts the process span from the
// message's traceparent, records the handler's error, and restores the
// message's context.
func TestMiddleware(t *testing.T) {
	tp, exp := tracingtest.New()
	tr, err := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka"})
	if err != nil {
		t.Fatal(err)
	}
	_, producer := tp.Tracer("producer").Start(t.Context(), "send")
	producer.End()
	msg := message.NewMessage("m-1", nil)
	tr.Headers(trace.ContextWithSpan(t.Context(), producer), msg.Metadata)
	orig := context.WithValue(t.Context(), struct{}{}, "caller's") // outside a router: no topic
	msg.SetContext(orig)
	var inHandler trace.SpanContext
	h := tr.Middleware(func(m *message.Message) ([]*message.Message, error) {
		inHandler = trace.SpanContextFromContext(m.Context())
		return nil, errors.New("handler failed")
	})
	if _, err := h(msg); err == nil || err.Error() != "handler failed" {
		t.Fatalf("middleware returned %v, want the handler's error", err)
	}
	if msg.Context() != orig {
		t.Error("the message's context was not restored")
	}
	process := spanNamed(t, exp.GetSpans(), "process")
	if process.Parent.SpanID() != producer.SpanContext().SpanID() || !process.Parent.IsRemote() {
		t.Errorf("process span parent = %v, want the remote producer span %v", process.Parent, producer.SpanContext())
	}
	if !inHandler.Equal(process.SpanContext) {
		t.Errorf("handler saw span %v, want the process span", inHandler)
	}
	if process.Status.Code != codes.Error {
		t.Errorf("process status = %+v, want Error", process.Status)
	}
	if a := attrs(process.Attributes); a["messaging.system"] != "kafka" || a["error.type"] == "" {
		t.Errorf("process attributes = %v, want messaging.system kafka and an error.type", a)
	}
}

// TestHandlerWithoutTraceparent: a message without trace context gets a
// process span of a new trace.
func TestHandlerWithoutTraceparent(t *testing.T) {
	tp, exp := tracingtest.New()
	tr, err := tracing.New(tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	h := tr.Handler(func(*message.Message) error { return nil })
	if err := h(message.NewMessage("m-1", nil)); err != nil {
		t.Fatal(err)
	}
	s := spanNamed(t, exp.GetSpans(), "process")
	if s.Parent.IsValid() || !s.SpanContext.IsValid() {
		t.Errorf("span parent %v, context %v: want a new trace", s.Parent, s.SpanContext)
	}
}

// TestHeadersWithoutSpan: a save with no span in its context gets no
// trace headers.
func TestHeadersWithoutSpan(t *testing.T) {
	tp, _ := tracingtest.New()
	tr, err := tracing.New(tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	tr.Headers(t.Context(), h)
	if len(h) != 0 {
		t.Errorf("headers = %v, want none", h)
	}
}

func TestNewRequiresTracerProvider(t *testing.T) {
	_, err := tracing.New(tracing.Config{})
	if !errors.Is(err, tracing.ErrInvalidConfig) {
		t.Fatalf("New(Config{}) = %v, want ErrInvalidConfig", err)
	}
}
