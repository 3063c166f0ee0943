// Package tracing carries OpenTelemetry traces through the outbox: from the
// save that writes an event, through the relay that publishes it, to the
// consumer that handles it. It is three decorators around seams the rest of
// the module already has, so runtime/... imports no OpenTelemetry:
//
//   - [Tracer.Headers], set as hooks.Config.Headers, stores the span context
//     active in the save's context (the W3C traceparent and tracestate of
//     [Config.Propagator]) in the headers of each outbox row the save
//     writes. The relay copies row headers into the message metadata.
//   - [Tracer.Publisher] wraps the relay's message.Publisher. For each
//     message it starts a PRODUCER span "send <topic>" that links to the
//     span context stored with the event, injects the send span's own
//     context into the message's traceparent, and ends when Publish
//     returns, with an error status for a message that failed.
//   - [Tracer.Handler] (or [Tracer.Middleware], for a Watermill router)
//     wraps the consumer's handler: it starts a CONSUMER span
//     "process <topic>" as a child of the message's traceparent (the send
//     span) and sets it in the message's context, which
//     runtime/consumer hands to the typed handler; the span ends with the
//     handler's outcome.
//
// The result, for an event recorded while handling a request:
//
//	trace A: POST /orders ─ save (outbox row stores A's span context)
//	trace B: send order (PRODUCER, links to A's span) ─ process order (CONSUMER) ─ the handler's own spans
//
// # Why the send span links, and the process span is a child
//
// The relay publishes an event after its transaction commits: a few
// milliseconds later, or hours later after an outage, after retries, and
// once more after a crash. A child span would sit outside its parent's
// time, would inherit the request's sampling decision, and every retry
// would add a sibling to a trace that ended long ago. So each publish
// attempt is a new trace whose send span links to the span that wrote the
// event (OpenTelemetry's messaging conventions use links for this
// creation context); trace viewers follow the link both ways. When the
// message's context already holds a span (a relay run under a span, or a
// consumer's dead-letter publish), the send span is its child.
//
// The consumer handles one message per call, so there is exactly one
// producing context: making the process span its child puts a delivery —
// the send and every consumer group's processing of it, with their database
// spans — in one small trace per event. Retries of the handler happen inside
// the one process span (runtime/consumer retries inside the handler call); a
// redelivery starts another process span under the same send span. A
// message without a traceparent gets a process span under whatever span
// the message's context holds, or a new trace.
//
// The caller's messages are never changed: the publisher publishes copies
// carrying the send span's traceparent, so a message the relay publishes
// again (a retry within a batch) links to the event's original span
// context, not to the failed attempt's send span.
//
// # Attributes
//
// Spans follow the OpenTelemetry messaging semantic conventions
// (semconv v1.43.0): messaging.system ([Config.System]),
// messaging.destination.name (the topic), messaging.operation.type and
// messaging.operation.name ("send" or "process"), messaging.message.id (the
// message UUID, which is the event id), messaging.message.body.size; plus,
// from the wire contract's metadata when present, outbox.event.type,
// outbox.event.version, outbox.aggregate.type and outbox.aggregate.id,
// read from the native keys (event_type, ...) or, for a message in
// CloudEvents binary content mode (relay.Config.CloudEvents, any binding
// prefix), from its type, eventversion, aggregatetype and partitionkey
// attributes, as runtime.EnvelopeFromMetadata reads them. A
// failed publish or handler sets the span status to Error, records the
// error as an event and sets error.type.
//
// The kind, system, operation and destination are set when a span starts,
// where a sampler sees them; the per-message attributes and the send span's
// link are computed only for a span that is recording, so a sampled-out
// message costs little more than carrying its traceparent on (with the
// sampled flag off, which a parent-based sampler on the consumer side
// honours, the SDK default).
//
// # Cost
//
// One span per message. go test -run '^$' -bench RelayTracing -benchtime 3x -count 2
// ./adapters/tracing/ drains 50,000 events (each with a traceparent) through
// the real relay to an ack-at-once publisher, the modes taking turns within
// each iteration; the SDK has a batching span processor. SaveTracing
// (-benchtime 2000x -count 3) saves an aggregate with one event under a span,
// alternating two schemas, with Headers unset and set. Measured on a 2-core
// machine while other jobs ran (load average 7–13), so the spread is wide;
// each cell is one run:
//
//	| what | tracing off | on, every span sampled | on, 1 % sampled |
//	|---|---|---|---|
//	| relay, in-memory store (the relay is the whole cost), quiet machine, -benchtime 3x -count 1 | 552,300 events/s | 162,400 (0.29×) | 314,500 (0.57×) |
//	| relay, PostgreSQL store, quiet machine | 94,400 events/s | 61,100 (0.65×) | 80,200 (0.85×) |
//	| GORM save + 1 event, PostgreSQL, quiet machine | 1,271 µs | 1,153 µs (no measurable cost) | |
//	| relay, in-memory store, loaded machine (two runs) | 164,700 / 162,200 events/s | 54,900 / 72,500 (0.33× / 0.45×) | 85,900 / 169,200 (0.52× / 1.04×) |
//	| relay, PostgreSQL store, loaded machine | 27,000 / 18,100 events/s | 19,800 / 18,600 (0.73× / 1.03×) | 19,100 / 23,900 (0.71× / 1.31×) |
//
// A sampled span costs the relay about 5–10 µs of CPU and 23 allocations per
// message (one span each, plus its copy of the message), so with every span
// sampled the relay's ceiling drops by half or more where nothing else limits
// it; sample the send spans (any sdktrace.Sampler) if the relay must run near
// its limit: a sampled-out message costs 12 allocations. An earlier run on
// PostgreSQL at load 5 (sub-benchmarks one after the other, and the decorator
// still computing every span's attributes and link before sampling) gave
// 62,300 → 31,900 events/s (0.51×) with every span sampled. The save pays
// nothing measurable: Headers formats one traceparent.
//
// # Wiring
//
//	tr, err := tracing.New(tracing.Config{TracerProvider: tp, System: "kafka"})
//	plugin, err := hooks.New(hooks.Config{Headers: tr.Headers})
//	rl, err := relay.New(store, tr.Publisher(kafkaPublisher), relay.Config{})
//	router.AddConsumerHandler("billing", "order", sub, tr.Handler(c.HandlerFunc()))
//
// Writers that bypass GORM (sqlstore.Writer, a CDC pipeline) call
// [Tracer.Headers] on the envelope's headers themselves.
//
// A consumer that reads partitions itself with consumer.Consumer.Run has no
// router handler to decorate: set consumer.Config{StartHandler:
// tr.StartHandler} instead (not both), which gives every handler call,
// batched or not, its own process span, a child of its message's send span
// (TestStartHandler).
//
// # Testing
//
// Package [github.com/gooutbox/outbox/adapters/tracing/tracingtest] records
// spans in memory for tests. TestEndToEnd follows one event from a GORM save
// on SQLite through the relay and adapters/memory to a consumer's handler;
// TestAttributesFromEitherMetadataForm reads the attributes from either
// metadata form.
package tracing
