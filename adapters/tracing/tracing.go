package tracing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/gooutbox/outbox/runtime"
)

// ScopeName is the instrumentation scope of the spans a [Tracer] starts.
const ScopeName = "github.com/gooutbox/outbox/adapters/tracing"

// DefaultSystem is the default of [Config.System].
const DefaultSystem = "watermill"

// Attribute keys the spans carry beside the messaging conventions' keys,
// taken from the wire contract's metadata.
const (
	AttrEventType     = attribute.Key("outbox.event.type")
	AttrEventVersion  = attribute.Key("outbox.event.version")
	AttrAggregateType = attribute.Key("outbox.aggregate.type")
	AttrAggregateID   = attribute.Key("outbox.aggregate.id")
)

// Config configures [New].
type Config struct {
	// TracerProvider creates the spans. Required: pass
	// otel.GetTracerProvider() to use the globally registered provider;
	// the package reads no global state of its own.
	TracerProvider trace.TracerProvider

	// Propagator writes the span context into outbox row headers and
	// message metadata, and reads it back. Default:
	// propagation.TraceContext{}, the W3C traceparent and tracestate that
	// the wire contract names ([runtime.MetadataTraceParent]). Pass a
	// composite propagator to carry baggage too.
	Propagator propagation.TextMapPropagator

	// System is the messaging.system attribute: the broker's well-known
	// name in the semantic conventions ("kafka", "rabbitmq", "aws_sqs",
	// "aws.sns", ...; "nats" and "redis" are not listed there and may be
	// used as they are). The relay publishes through a message.Publisher,
	// which does not say what it talks to. Default: [DefaultSystem],
	// "watermill".
	System string
}

func (c *Config) setDefaults() {
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	if c.System == "" {
		c.System = DefaultSystem
	}
}

// Validate reports whether c is usable; the error wraps [ErrInvalidConfig].
func (c Config) Validate() error {
	if c.TracerProvider == nil {
		return fmt.Errorf("%w: TracerProvider is required (pass otel.GetTracerProvider() for the global one)", ErrInvalidConfig)
	}
	return nil
}

// Tracer makes the decorators of the package documentation from one
// [Config]. It is safe for concurrent use, and so is everything it returns.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system attribute.KeyValue
}

// New returns a Tracer for cfg, applying the defaults documented on
// [Config]. It returns an error wrapping [ErrInvalidConfig] when cfg has no
// TracerProvider.
func New(cfg Config) (*Tracer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracer{
		tracer: cfg.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   cfg.Propagator,
		system: semconv.MessagingSystemKey.String(cfg.System),
	}, nil
}

// Headers writes the span context of ctx into headers with the configured
// propagator (with the default, traceparent and, when set, tracestate), and
// nothing when ctx holds no valid span context. Its signature is that of
// hooks.Config.Headers, so the outbox rows a save writes carry the span
// context of the save's context (db.WithContext(ctx)).
func (t *Tracer) Headers(ctx context.Context, headers map[string]string) {
	t.prop.Inject(ctx, propagation.MapCarrier(headers))
}

// Publisher returns pub decorated with a send span per message (see the
// package documentation). The decorator publishes copies of the messages,
// with the send span's context as their context and in their metadata, and
// returns pub's error unchanged; it leaves the caller's messages as they
// were. Closing it closes pub.
func (t *Tracer) Publisher(pub message.Publisher) *Publisher {
	return &Publisher{t: t, pub: pub}
}

// Publisher is a message.Publisher that traces each message it publishes
// through another one. Create it with [Tracer.Publisher]. It is safe for
// concurrent use if the publisher it wraps is.
type Publisher struct {
	t   *Tracer
	pub message.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// Publish starts a PRODUCER span per message, linked to the span context in
// the message's metadata, publishes copies carrying the span's context to
// topic through the wrapped publisher, and ends the spans: with an error
// status for every message when Publish fails, or for the failed ones only
// when the error is a [runtime.PublishErrors] of one error per message.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	spans := make([]trace.Span, len(msgs))
	out := make([]*message.Message, len(msgs))
	start := p.t.startOptions(trace.SpanKindProducer, topic, semconv.MessagingOperationTypeSend, "send")
	name := "send " + topic
	for i, m := range msgs {
		if m == nil { // passed through for the wrapped publisher to judge
			continue
		}
		ctx, span := p.t.tracer.Start(m.Context(), name, start...)
		if span.IsRecording() { // what a sampled-out span would drop is not computed
			created := trace.SpanContextFromContext(p.t.prop.Extract(context.Background(), propagation.MapCarrier(m.Metadata)))
			if created.IsValid() {
				span.AddLink(trace.Link{SpanContext: created})
			}
			span.SetAttributes(messageAttributes(m)...)
		}
		c := message.NewMessage(m.UUID, m.Payload)
		c.Metadata = make(message.Metadata, len(m.Metadata)+2)
		maps.Copy(c.Metadata, m.Metadata)
		p.t.prop.Inject(ctx, propagation.MapCarrier(c.Metadata))
		c.SetContext(ctx)
		spans[i], out[i] = span, c
	}
	err := p.pub.Publish(topic, out...)
	var each runtime.PublishErrors
	perMessage := errors.As(err, &each) && len(each) == len(msgs)
	for i, span := range spans {
		if span == nil {
			continue
		}
		e := err
		if perMessage {
			e = each[i]
		}
		end(span, e)
	}
	return err
}

// Close closes the wrapped publisher.
func (p *Publisher) Close() error { return p.pub.Close() }

// Handler returns h decorated with a CONSUMER span per message (see the
// package documentation): the span is a child of the message's traceparent,
// is in the message's context while h runs (runtime/consumer passes that
// context to the typed handler), and ends with h's outcome. The message's
// context is restored when h returns.
func (t *Tracer) Handler(h message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		span, restore := t.startProcess(msg)
		defer restore()
		err := h(msg)
		end(span, err)
		return err
	}
}

// Middleware is [Tracer.Handler] as a Watermill router middleware, for
// router.AddMiddleware or a handler's AddMiddleware.
func (t *Tracer) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		span, restore := t.startProcess(msg)
		defer restore()
		out, err := h(msg)
		end(span, err)
		return out, err
	}
}

// StartHandler is for consumer.Config.StartHandler: it starts the CONSUMER
// span of one handler call, a child of the trace context in env's headers
// (the send span's, injected by [Tracer.Publisher]), in the context it
// returns; end ends it with the handler's outcome. Unlike [Tracer.Handler],
// it also covers consumer.Consumer.Run, which applies batches of messages
// in one transaction: each event's handler call gets its own span. Use one
// or the other, not both.
func (t *Tracer) StartHandler(ctx context.Context, topic string, env runtime.Envelope) (context.Context, func(error)) {
	name := "process"
	if topic != "" {
		name += " " + topic
	}
	ctx = t.prop.Extract(ctx, propagation.MapCarrier(env.Headers))
	ctx, span := t.tracer.Start(ctx, name,
		t.startOptions(trace.SpanKindConsumer, topic, semconv.MessagingOperationTypeProcess, "process")...)
	if span.IsRecording() {
		span.SetAttributes(envelopeAttributes(env)...)
	}
	return ctx, func(err error) { end(span, err) }
}

// envelopeAttributes returns the attributes of a message with envelope
// env: those of [messageAttributes] but the body size, unknown here.
func envelopeAttributes(env runtime.Envelope) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingMessageID(env.EventID.String()),
		AttrEventType.String(env.EventType),
		AttrEventVersion.Int(env.EventVersion),
		AttrAggregateType.String(env.AggregateType),
		AttrAggregateID.String(env.AggregateID),
	}
}

// startProcess starts the process span of msg, sets it in msg's context,
// and returns it with a function that restores msg's context.
func (t *Tracer) startProcess(msg *message.Message) (trace.Span, func()) {
	orig := msg.Context()
	topic := message.SubscribeTopicFromCtx(orig)
	name := "process"
	if topic != "" {
		name += " " + topic
	}
	parent := t.prop.Extract(orig, propagation.MapCarrier(msg.Metadata))
	ctx, span := t.tracer.Start(parent, name,
		t.startOptions(trace.SpanKindConsumer, topic, semconv.MessagingOperationTypeProcess, "process")...)
	if span.IsRecording() {
		span.SetAttributes(messageAttributes(msg)...)
	}
	msg.SetContext(ctx)
	return span, func() { msg.SetContext(orig) }
}

// startOptions returns the options of a span of kind for an operation on
// topic: its kind and the attributes a sampler may look at (the messaging
// conventions' sampling-relevant ones), the same for every message.
func (t *Tracer) startOptions(kind trace.SpanKind, topic string, op attribute.KeyValue, opName string) []trace.SpanStartOption {
	a := []attribute.KeyValue{t.system, op, semconv.MessagingOperationName(opName)}
	if topic != "" {
		a = append(a, semconv.MessagingDestinationName(topic))
	}
	return []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(a...)}
}

// messageAttributes returns the attributes of message m: its id and size,
// and the wire contract's event type, version and aggregate when present,
// from the native metadata keys or, for a CloudEvent, its attributes (see
// [eventKeys]).
func messageAttributes(m *message.Message) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 6)
	a = append(a, semconv.MessagingMessageID(m.UUID), semconv.MessagingMessageBodySize(len(m.Payload)))
	typeKey, versionKey := eventKeys(m.Metadata)
	if v := m.Metadata.Get(typeKey); v != "" {
		a = append(a, AttrEventType.String(v))
	}
	aggType, aggID := runtime.AggregateOf(m.Metadata)
	if aggType != "" {
		a = append(a, AttrAggregateType.String(aggType))
	}
	if aggID != "" {
		a = append(a, AttrAggregateID.String(aggID))
	}
	if v, err := strconv.Atoi(m.Metadata.Get(versionKey)); err == nil {
		a = append(a, AttrEventVersion.Int(v))
	}
	return a
}

// eventKeys returns the metadata keys of the event type and version in md:
// the native keys or, for metadata without an event_type but with a
// CloudEvents specversion under a binding prefix, the type and eventversion
// attributes under that prefix, as [runtime.EnvelopeFromMetadata] reads
// them. (That function decodes a whole envelope, strictly: a span takes
// whatever is present, per message, without copying the headers or reading
// the payload.)
func eventKeys(md message.Metadata) (typeKey, versionKey string) {
	if md.Get(runtime.MetadataEventType) == "" {
		for _, p := range [...]string{runtime.CloudEventsPrefixKafka, runtime.CloudEventsPrefixHTTP,
			runtime.CloudEventsPrefixAMQP, runtime.CloudEventsPrefixAMQPJMS} {
			if _, ok := md[p+runtime.CESpecVersion]; ok {
				return p + runtime.CEType, p + runtime.CEEventVersion
			}
		}
	}
	return runtime.MetadataEventType, runtime.MetadataEventVersion
}

// end ends span with err's outcome.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorType(err))
	}
	span.End()
}
