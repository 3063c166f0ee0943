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
// A relay can publish every event as a CloudEvent 1.0
// (https://github.com/cloudevents/spec) in binary content mode: the payload
// stays the event's JSON, and the metadata holds the CloudEvents attributes
// instead of the native keys. Turn it on per relay with relay.New(store, pub,
// relay.Config{CloudEvents: &runtime.CloudEvents{Source: "/orders-service",
// DataSchemaBase: "https://schemas.example.com/outbox"}}): Source (required)
// is a URI-reference naming the producer, DataSchemaBase (optional) the
// absolute URI under which the files of outboxgen -export are served.
// A nil relay.Config.CloudEvents (the default) keeps the native metadata.
// runtime/consumer reads both forms, so consumers need no setting; switch
// producers after consumers run a version with CloudEvents support. The
// mapping is in the documentation of [CloudEvents].
//
// On the consuming side, metadata without event_type but with a specversion
// attribute is read as a CloudEvent: id, source, specversion (1.x) and type
// are required, and a message lacking one is malformed. The event version is
// ce_eventversion or, for other producers' events, the payload's
// event_version; a JSON payload without event_version gets it (and occurred_at
// from ce_time) from the attributes before it is decoded, as the event structs
// require both; an id that is not a UUID becomes a stable name-based UUID of
// source and id, so the inbox deduplicates it. Source, dataschema and the rest
// stay in Meta.Headers. From Kafka, a CloudEvent without a ce_partitionkey
// header takes the record's key as its partitionkey (and so as the aggregate
// id), since the Kafka binding maps that attribute to the key and other
// producers may set only the key.
//
// datacontenttype travels in content-type, not ce_datacontenttype: every
// protocol binding maps it to the protocol's content type. With
// adapters/kafka, the record's headers are then exactly the Kafka binding's
// (the adapter adds no event_id header to a CloudEvent and takes the message
// UUID from ce_id), so CloudEvents SDKs for Kafka read the records (a test
// checks the headers against the spec's rules). Our adapters write metadata as
// broker headers unchanged, so for the other bindings set CloudEvents.Prefix:
// runtime.CloudEventsPrefixAMQP (cloudEvents:) for RabbitMQ,
// runtime.CloudEventsPrefixHTTP (ce-) for NATS; the consumer recognises all of
// them. That matches those bindings' attribute names, but not fully:
// adapters/amqp sends content-type as an application header rather than the
// AMQP content-type property, and the Watermill-based adapters add their own
// transport headers (the message UUID). We map the attributes ourselves rather
// than use the CloudEvents Go SDK: the mapping is a dozen headers on a
// Watermill message, and the SDK would bring its own message abstractions and
// protocol clients for no gain.
//
// # Concepts
//
//   - Event ([Event]): a domain event: its wire type and version (EventKey),
//     when it occurred (EventTime) and Validate. outboxgen generates them;
//     hand-written ones work too.
//   - Recorder ([Recorder]): embedded by value in an aggregate; Record
//     collects events until the transaction that saves the aggregate
//     commits. Each event gets its id (UUIDv7) when it is recorded, so a
//     retried save never writes it twice.
//   - Envelope ([Envelope]): an event on its way: id, type, version,
//     aggregate type and id, occurred-at, headers (correlation id, W3C
//     traceparent) and the JSON payload.
//   - OutboxMessage ([OutboxMessage]): a row of the outbox table
//     (outbox_messages unless you name another, beside
//     outbox_messages_leases and outbox_messages_relays, which the relays
//     share): an envelope with its position and destination topic.
//   - Registry ([Registry]): maps (type, version) to decoders, so a consumer
//     decodes every version it knows into the latest and gets a typed error
//     for a version it does not.
//   - Relay (package runtime/relay): claims batches of pending rows,
//     publishes them through a Watermill message.Publisher (one call per
//     topic), then marks them; woken by PostgreSQL LISTEN/NOTIFY, by Notify
//     after a commit, or by a poll.
//
// # Logs
//
// The relay (relay.Config.Logger) and the consumer (consumer.Config.Logger)
// log through slog.Default() unless you give them a *slog.Logger, as do the
// retention (sqlstore.RetentionConfig.Logger) and the dashboard
// (dashboard.Config.Logger, which also logs each retry and discard); pass
// slog.New(slog.DiscardHandler) to silence them. The relay and the consumer
// log at WARN what they handle themselves — a failed publish or claim they
// retry, a message skipped, nacked or dead-lettered — one line per failure, at
// INFO when the relay starts and stops, and at DEBUG per batch or message.
// With no broker listening, a relay (examples/readme/app, say) prints within
// a fraction of a second, and again at each try (every sqlstore.StoreConfig.RetryDelay, 1 s):
//
//	2026/11/30 10:41:53 WARN relay: publish failed outbox_id=1 topic=order event_id=0197d1c2-5a8e-7c1b-9f3e-2d4b6a8c0e11 event_type=orders.order_placed messages=1 published=0 permanent=false error="kafka: publish 1 messages to topic \"order\": dial tcp 127.0.0.1:9092: connect: connection refused" attempt=1 backoff=78.031669ms
//
// A consumer's message that cannot be applied and has no dead-letter publisher
// (it fails to decode, its handler keeps failing) logs consumer: message
// nacked with the reason and error, in a router and with Consumer.Run alike
// (which tries it again in place, stalling its partition). As it is tried
// again and again, its lines are at WARN on its 1st, 2nd, 4th, 8th, ... try in
// a row (nacks) and at DEBUG in between, so a stalled partition stays visible
// without a line per retry. What stalls behind it is whatever the broker
// orders with it: a Kafka partition, but on RabbitMQ (one queue per topic and
// group, with a single active consumer), NATS JetStream and Redis streams,
// which keep a topic's order as one stream per group, the whole topic for that
// group. Set consumer.Config.DeadLetterPublisher where one bad message must
// not hold the rest (see package runtime/consumer).
//
// The adapters (Kafka, AMQP, NATS, Redis, SQS and SNS, SQL, memory) take the
// *slog.Logger itself in their config (kafka.PublisherConfig.Logger,
// kafka.SubscriberConfig.Logger, amqp.Config.Logger, ...) and bridge it to
// Watermill once, inside; nil means slog.Default(), as for the relay and the
// consumer. broker.Open takes it in broker.Config.Logger and hands it to the
// adapter it opens, so an application passes one *slog.Logger to the relay,
// the consumer and the broker. Only Watermill's own components, such as the
// router, still take a watermill.LoggerAdapter; bridge them to the same logger
// with watermill.NewSlogLogger(slog.Default()), as the examples do.
//
// Messages are constant strings prefixed by the component (relay: publish
// failed, consumer: message dead-lettered); everything that varies is an
// attribute. The attribute keys are the same wherever they appear (the relay,
// the consumer and the adapters), and are part of the API:
//
//	| key | meaning | logged by |
//	|---|---|---|
//	| topic | the topic published to or consumed from | relay, consumer, adapters |
//	| event_id | the event id (UUIDv7) | relay, consumer |
//	| event_type, event_version | the event's wire type and schema version | relay (type), consumer |
//	| outbox_id | the outbox row's id (Store.Unpark/Discard take it) | relay |
//	| message_uuid | the broker message's UUID, which is the event id for messages the relay published | consumer, adapters |
//	| error | the error's message, on one line | relay, consumer, adapters |
//	| attempt, backoff | which consecutive attempt failed, and the wait before the next | relay, consumer |
//	| permanent | the broker refused the message for good: it is parked | relay |
//	| messages, published, claimed | counts of the batch: failed, published, claimed | relay |
//	| owner, shards, was | the relay's name in the lease table, the shards it holds now and held before | relay |
//	| for, stand_aside | how long nothing the relay claimed could be published, and how long it claims nothing after handing its shards over | relay |
//	| consumer, reason, dead_letter_topic | the consumer's name, why a message was not applied, where it was dead-lettered | consumer |
//	| nacks | how many times in a row a message has been nacked (with Consumer.Run: held back and tried again), this time included | consumer |
//	| consumer_group, partition, offset, component | the subscriber's group, the record's position, the adapter | adapters |
//
// TestLogKeysOfPublishFailure (runtime/relay) and TestLogKeysOfHandlerFailure
// (runtime/consumer) pin the messages, levels and keys of a failed publish and
// of a failing handler; TestLogKeysOfRunFailure and
// TestLogKeysOfNackInHandlerFunc those of a nacked message.
//
// # Layout
//
// The runtime folder is the core: events, the envelope, the registry, the
// recorder (this package), the relay (runtime/relay), the SQL storage layer
// behind its driver seam (runtime/sqlstore, with the database/sql and pgx v5
// drivers in runtime/sqlstore/databasesql and runtime/sqlstore/pgxv5), the
// consumer and its inbox (runtime/consumer), the health checks
// (runtime/health), the dashboard (runtime/dashboard), the helpers of
// generated code (runtime/outboxgenrt) and the test kit
// (runtime/runtimetest: the store conformance suite, the in-memory store,
// the test databases). This package, its root, imports only the standard
// library and github.com/google/uuid. Nothing under runtime imports GORM
// (everything GORM is under hooks) or a broker client (under adapters).
// Observability follows the dependency: what needs only the standard
// library (health checks, the dashboard, slog lines) is here; what is built
// on a vendor SDK (Prometheus, OpenTelemetry) is a nested module under
// adapters.
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
