// Package runtime holds the contract shared by every part of gooutbox: the
// [Event] interface that generated and hand-written events satisfy, the
// [Recorder] that aggregates embed to collect them, the [Envelope] and
// [OutboxMessage] that carry them to the broker, the [Registry] consumers use to
// decode any historical version, and the wire contract (metadata keys).
//
// The package imports only the standard library and github.com/google/uuid, so
// domain code that embeds a [Recorder] pulls in no database or broker client.
//
// # Wire contract
//
// Every event leaves the outbox as one broker message:
//
//   - message UUID (Watermill) = the event id, a UUIDv7 ([Envelope.EventID]);
//   - metadata [MetadataEventType], [MetadataEventVersion], [MetadataEventID],
//     [MetadataAggregateType], [MetadataAggregateID], [MetadataOccurredAt]
//     (RFC 3339 with nanoseconds, UTC), [MetadataCorrelationID] when known and
//     the W3C [MetadataTraceParent] / [MetadataTraceState] when known, and
//     [MetadataMinReaderVersion] for a version older readers can decode;
//   - Kafka key = the aggregate id, so one aggregate's events share a partition;
//   - payload = the event's JSON, which itself carries event_version and
//     occurred_at.
//
// # CloudEvents
//
// Instead of the native metadata, a relay can write the attributes of a
// CloudEvent 1.0 in binary content mode ([CloudEvents], table there):
// ce_specversion, ce_id, ce_source, ce_type, ce_time, ce_dataschema,
// content-type and the extensions ce_eventversion, ce_partitionkey,
// ce_aggregatetype, ce_minreaderversion and ce_correlationid (Kafka binding
// prefix; [CloudEvents.Prefix] selects the AMQP or HTTP/NATS one).
// [EnvelopeFromMetadata] reads both forms, and [AggregateOf] gives adapters
// the aggregate of either.
//
// # Name
//
// The package is called runtime because generated code imports it as the
// support library of outboxgen, as ent and grpc-gateway do. Helpers that
// only generated code calls live apart, in package runtime/outboxgenrt,
// which makes no compatibility promise to application code. It is never
// aliased; a file that also needs the standard library package imports that
// one as goruntime. Errors and logs use the prefix "outbox:".
package runtime
