// Package broker opens a broker adapter from a URL, so that choosing a
// broker is configuration: the relay command and the quickstart take a
// broker URL and call [Open].
//
// It is the entry to the adapters folder, whose rule is: what connects the
// outbox to a broker, through Watermill, and what is built on a vendor SDK.
// The root module holds Kafka (adapters/kafka, with its in-process broker
// adapters/kafka/kafkatest), the in-process memory broker, this package
// and the adapters' conformance suite (adapters/adaptertest); each heavy
// client is a nested module a program requires only when it imports it
// (adapters/amqp, nats, redis, sql, sqs), as are adapters/metrics
// (Prometheus), adapters/tracing (OpenTelemetry), the operator command
// (adapters/cmd/outbox, which imports every adapter) and adapters/harness
// (the correctness suite and the benchmark program).
//
// Like database/sql's drivers, each adapter registers its schemes with
// [Register] when it is imported, so a program compiles only the brokers it
// imports (a blank import is enough):
//
//	kafka://host:9092[,host2:9092]        github.com/gooutbox/outbox/adapters/kafka
//	memory://                             github.com/gooutbox/outbox/adapters/memory (in-process)
//	amqp://user:pass@host:5672/vhost      github.com/gooutbox/outbox/adapters/amqp (RabbitMQ; amqps:// too)
//	nats://host:4222                      github.com/gooutbox/outbox/adapters/nats (JetStream)
//	redis://host:6379/0                   github.com/gooutbox/outbox/adapters/redis (Redis Streams)
//	postgres://user@host:5432/db          github.com/gooutbox/outbox/adapters/sql (tables on PostgreSQL)
//	sqs://host:port                       github.com/gooutbox/outbox/adapters/sqs (SQS FIFO)
//	sns://host:port                       github.com/gooutbox/outbox/adapters/sqs (SNS FIFO fan-out to SQS FIFO)
//
// Kafka and memory are in this module; the others are modules of their own
// (go get github.com/gooutbox/outbox/adapters/nats, say), so that a program
// that does not use a broker does not require its client either. [Open]
// with a scheme nobody registered names the import that provides it. The
// outbox command (adapters/cmd/outbox) imports every adapter.
//
// Each scheme's query parameters are documented in its adapter's package
// (go doc -u on its open function: go doc -u
// github.com/gooutbox/outbox/adapters/amqp openAMQP, openNATS, ...). Unknown query parameters are an error,
// so a typo never silently falls back to a default.
//
// # Choosing a broker
//
// The relay publishes through any Watermill message.Publisher, but a publisher
// is only safe for the outbox if Publish returns nil only once the broker
// holds the message. Watermill's own adapters are not all configured that way:
// RabbitMQ with NewDurableQueueConfig confirms a message that no queue
// receives (measured: 5,000 of 5,000 events gone, all marked published),
// gochannel returns before delivery and drops messages nobody subscribed to,
// and NATS JetStream fails forever on a dotted topic or an unprovisioned
// stream. So use the adapters in adapters/, each a constructor that returns a
// Watermill publisher and subscriber configured so that no setting it accepts
// loses or reorders an event silently, and each mapping what can never succeed
// (too large, invalid topic, unroutable) to runtime.Permanent (the store parks
// it) and the rest to a retry. Choosing one is configuration: adapters/broker
// opens any imported adapter from a URL (importing adapters/amqp registers
// amqp://), as the quickstart (-broker-url) and the relay command do: b, err
// := broker.Open(ctx, "amqp://guest:guest@127.0.0.1:5672/", broker.Config{}),
// then relay.New(store, b.Publisher(), relay.Config{}) on the producing side
// and b.Subscriber("billing") (a consumer group) on the consuming side. On
// RabbitMQ the default mode=queue has one queue per topic shared by every
// subscriber, whatever its group; for a queue per group use
// amqp://…/?mode=pubsub&groups=billing,shipping (the groups the publisher
// routes to). With Redis
// Streams, run one subscriber per group (see the list below): two in one group share a stream's entries and break per-aggregate
// order.
//
// # What each broker promises
//
// "Fenced" says whether a relay that lost its lease can have a write reach
// the broker after its successor's (package runtime/relay, Fencing).
//
//   - Kafka (kafka://h:9092), adapters/kafka (kafka-go). Order per aggregate:
//     yes: key = aggregate id. Dedup by event id: no. Fenced: yes: no produce
//     request after the publish's deadline. Durable: yes (acks=all). What the
//     adapter sets up for you: synchronous writes, hash balancer on the
//     aggregate id, per-partition errors per message.
//   - RabbitMQ (amqp://, amqps://), adapters/amqp (amqp091-go;
//     watermill-amqp's subscriber). Order per aggregate: yes (classic queues;
//     not quorum=true, which redelivers a nacked message after later ones).
//     Dedup by event id: no. Fenced: yes on amqp:// (no frame after the
//     publish's deadline); not on amqps://. Durable: yes. What the adapter
//     sets up for you: declares the queue (or fanout exchange and groups=
//     queues) before the first publish; confirms + mandatory, a returned
//     message is a permanent error (retryable when the queue went away after
//     an earlier declaration: the retry declares it again); persistent
//     delivery; single active consumer, prefetch 1.
//   - NATS JetStream (nats://h:4222), adapters/nats (nats.go, watermill-nats's
//     format). Order per aggregate: yes (one message in flight per group).
//     Dedup by event id: yes: Nats-Msg-Id = event id, 10 min window. Fenced:
//     by dedup (10 min). Durable: yes (file storage). What the adapter sets up
//     for you: creates a stream per topic (or uses one that already captures
//     it), valid names for dotted topics, waits for every PubAck; reconnects
//     for ever, ReconnectWait (2s) apart: while disconnected a publish fails
//     at once (retryable) instead of waiting PublishTimeout, and after a
//     reconnect the subscriber acks its recent messages again, so after a
//     server restart (even a crash that lost acks) publishing resumes within
//     about ReconnectWait plus the relay's backoff (MaxBackoff, 5s) and
//     consuming within about ReconnectWait, not AckWait (TestServerRestart);
//     but a group member that dies or freezes holding its message holds the
//     whole group until AckWait (30 s) passes (a new user's trial: 30 s after
//     each kill -9).
//   - Redis Streams (redis://h:6379/0), adapters/redis (go-redis;
//     watermill-redisstream's subscriber). Order per aggregate: yes (one
//     subscriber per group at a time; a subscriber that starts first hands out
//     the entries a stopped one left pending,
//     TestRestartTakesOverPendingEntries). Dedup by event id: yes, by the
//     publisher: a Lua script adds an entry only if SET
//     {stream}:outbox:dedup:<event id> NX PX succeeds; 10-min window
//     (dedupwindow=, off disables; about 140 bytes + the stream name per event
//     for the window). Fenced: by dedup (10 min). Durable: as the server's
//     AOF/RDB settings say. What the adapter sets up for you: one pipelined
//     round trip per batch (EVALSHA per message: about half the rate of plain
//     XADD); no trimming unless maxlen=/maxage= (trimming deletes entries a
//     slow group has not read).
//   - PostgreSQL tables (postgres://), adapters/sql (watermill-sql's
//     subscriber loop). Order per aggregate: yes. Dedup by event id: no.
//     Fenced: yes: one INSERT per publish under its context, not sent once
//     it has ended. Durable: yes. What the adapter sets up for you: offsets
//     given in commit order by a per-topic counter row, so nothing committed
//     out of order is skipped and no transaction elsewhere on the server (nor
//     a message held in another group or topic) delays delivery; one INSERT
//     per batch.
//   - in-process (memory://), adapters/memory. Order per aggregate: yes. Dedup
//     by event id: no. Fenced: one process. Durable: no (one process). What
//     the adapter sets up for you: an append-only log per topic: nothing
//     dropped without subscribers, replayed in order to late subscribers.
//   - SQS FIFO (sqs://), SNS FIFO (sns://), adapters/sqs (aws-sdk-go-v2).
//     Order per aggregate: yes: MessageGroupId = aggregate id. Dedup by event
//     id: yes: MessageDeduplicationId = event id, 5 min. Fenced: by dedup (5
//     min). Durable: yes. What the adapter sets up for you: batches of ≤ 10 /
//     256 KiB, one message per group per request, per-entry errors per
//     message; SNS: refuses (retryably) to publish to a topic with no
//     subscription, which SNS would drop.
//
// # Error classes
//
// Each adapter also marks the failures that are the broker's or
// the connection's, not the message's, as runtime.Transient (per message where
// it knows): the store then delays the retry but counts no attempt, so
// StoreConfig.MaxAttempts never parks a healthy message for a leader election
// or an outage, however long it lasts. Only failures left unclassified count
// toward MaxAttempts, the safe default for a poison message. The classes, as
// each package doc lists them:
//
//	| adapter | permanent (parked at once) | transient (retried, never counted) |
//	|---|---|---|
//	| adapters/kafka | record too large (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE), invalid topic | every code kafka-go calls retriable (NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS, NETWORK_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION, …) but CORRUPT_MESSAGE; connection lost or refused, network timeouts, the write's context ended |
//	| adapters/amqp | unroutable after this call declared the topology, larger than max_message_size, invalid topic | not confirmed (channel or connection closed, ConfirmTimeout), nacked, connection closed with 320/506/541, network errors |
//	| adapters/nats | larger than max_payload or the stream's max_msg_size, invalid subject | not connected (reconnecting, disconnected, draining, closed), no responders, PubAck timeout, JetStream 503, network errors |
//	| adapters/redis | WRONGTYPE, empty topic | network errors and timeouts, pool timeout, LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY |
//	| adapters/sqs | SenderFault=true entries, invalid group id or topic | entries the service failed (SenderFault=false), what the AWS SDK retries (throttling, 5xx, connection reset), network errors |
//	| adapters/sql | invalid topic, data the database refuses | bad or closed connection, network errors, SQLSTATE 08xxx, 53xxx, 57P01–57P03, 40001, 40P01 |
//
// The Kafka, RabbitMQ, NATS and Redis publishers also have Ping(ctx), which
// outbox relay --listen uses for a broker check in /readyz: a relay that
// cannot reach its broker is not ready (health.Config.Broker).
//
// A program compiles only the adapters it imports: this package imports
// none (a test checks it, and that adapters/kafka compiles no other broker's
// client, with go list -deps), and each adapter but Kafka and memory is a
// module of its own (see Modules and versions).
//
// # Modules and versions
//
// A program pays only for the brokers it imports. The root module,
// github.com/gooutbox/outbox, holds the core — events, the generator, the GORM
// plugin, the relay, the storage layer, the consumer — and the Kafka and
// in-memory adapters. What is built on another broker's client or a vendor SDK
// is a module of its own, so that a PostgreSQL + Kafka service neither
// compiles nor requires it:
//
//	| module | what | go get |
//	|---|---|---|
//	| github.com/gooutbox/outbox | runtime, hooks, outboxgen, templates, adapters/kafka, adapters/memory, adapters/broker, adapters/adaptertest | go get github.com/gooutbox/outbox |
//	| …/adapters/amqp | RabbitMQ (amqp091-go, watermill-amqp) | go get github.com/gooutbox/outbox/adapters/amqp |
//	| …/adapters/nats | NATS JetStream (nats.go, watermill-nats) | go get github.com/gooutbox/outbox/adapters/nats |
//	| …/adapters/redis | Redis Streams (go-redis, watermill-redisstream) | go get github.com/gooutbox/outbox/adapters/redis |
//	| …/adapters/sql | tables on PostgreSQL | go get github.com/gooutbox/outbox/adapters/sql |
//	| …/adapters/sqs | SQS FIFO and SNS FIFO (AWS SDK v2) | go get github.com/gooutbox/outbox/adapters/sqs |
//	| …/adapters/eventbridge | Amazon EventBridge (AWS SDK v2) | go get github.com/gooutbox/outbox/adapters/eventbridge |
//	| …/adapters/servicebus | Azure Service Bus (Azure SDK) | go get github.com/gooutbox/outbox/adapters/servicebus |
//	| …/adapters/metrics | Prometheus metrics | go get github.com/gooutbox/outbox/adapters/metrics |
//	| …/adapters/tracing | OpenTelemetry tracing | go get github.com/gooutbox/outbox/adapters/tracing |
//	| …/adapters/cmd/outbox | the outbox operator command (imports every adapter) | go get -tool github.com/gooutbox/outbox/adapters/cmd/outbox |
//	| …/adapters/kafka/kafkatest | an in-process Kafka cluster for tests (franz-go's kfake) | go get github.com/gooutbox/outbox/adapters/kafka/kafkatest |
//	| …/hooks/hookstest | GORM test databases: PostgreSQL, MySQL/MariaDB, SQLite | go get github.com/gooutbox/outbox/hooks/hookstest |
//	| …/adapters/harness | the correctness suite and the benchmark program | not for use as a dependency |
//	| …/internal/coretest | the tests of hooks, runtime/sqlstore, runtime/consumer, runtime/dashboard and adapters/kafka | not for use as a dependency |
//	| …/examples | the quickstart and the README's programs | not for use as a dependency |
//
// Every module is released with the same version: a release
// tags the root vX.Y.Z and each nested module <dir>/vX.Y.Z
// (adapters/nats/v0.9.0, adapters/cmd/outbox/v0.9.0; Go finds a nested
// module's version by the tag prefixed with its directory), after setting the
// nested modules' require github.com/gooutbox/outbox (and of each other) to
// vX.Y.Z. In the repository they build against the working tree: go.work for
// the workspace, and a replace to the relative directory in each nested
// go.mod, which Go ignores when the module is a dependency, so go mod tidy
// works inside each module (GOWORK=off go mod tidy). A nested module shares
// the root's internal packages (adapters/internal/...), so use the same
// version of both. hooks/hookstest and adapters/kafka/kafkatest were
// packages of the root module before they became modules: a build that
// requires both an older root and one of them reports an ambiguous import,
// which go get github.com/gooutbox/outbox@latest resolves.
//
// # Layout
//
// The adapters folder holds what connects the outbox to the world outside
// the database: the brokers, each a Watermill publisher and subscriber
// configured for the outbox (Kafka and the in-process broker in the root
// module, and one nested module per heavy vendor SDK or broker client:
// adapters/amqp, adapters/eventbridge, adapters/nats, adapters/redis,
// adapters/servicebus, adapters/sql, adapters/sqs), this package, which
// opens them by URL, and their conformance suite (adapters/adaptertest); an
// in-process Kafka for tests (adapters/kafka/kafkatest, a module of its own
// for franz-go); the outbox operator command (adapters/cmd/outbox,
// a module of its own that imports every adapter); Prometheus metrics
// (adapters/metrics) and OpenTelemetry tracing (adapters/tracing), modules of
// their own; and the correctness suite and the benchmark program
// (adapters/harness, a module not for use as a dependency).
package broker
