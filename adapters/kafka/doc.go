// Package kafka is a Watermill [message.Publisher] and [message.Subscriber]
// for Apache Kafka, built on github.com/segmentio/kafka-go.
//
// It is the broker adapter of the outbox relay: the relay publishes outbox
// rows through a [Publisher], and consumers read them back with a
// [Subscriber], directly or through a Watermill [message.Router]. Any other
// Watermill publisher works with the relay too; this package exists because
// Watermill's own Kafka adapter is built on Sarama.
//
// # Publishing
//
// [NewPublisher] builds kafka-go Writers that are safe for concurrent use:
// up to three that differ only in BatchSize, so that a small publish does
// not pay for a large batch's preallocated records (see
// [PublisherConfig.BatchSize]). Their settings are the ones an outbox needs,
// not kafka-go's zero values:
//
//   - RequiredAcks is kafka.RequireAll: a publish succeeds only once every
//     in-sync replica has the records.
//   - The balancer is kafka.Hash, so records with the same key go to the same
//     partition and keep their order. The key is the message's aggregate_id
//     metadata ([runtime.MetadataAggregateID]; for a CloudEvent, its
//     ce_partitionkey header) unless [PublisherConfig.Key]
//     says otherwise; a message without one gets a nil key and is spread
//     round robin, with no ordering guarantee.
//   - Writes are synchronous: [Publisher.Publish] returns only when the broker
//     has answered, and one Publish call is one WriteMessages call on one
//     writer, so a batch of messages is written together.
//
// Metadata travels as Kafka record headers. The message UUID travels as the
// event_id header ([runtime.MetadataEventID]) unless the metadata already
// carries one, and the subscriber sets the received message's UUID from it.
// A CloudEvent (a relay with relay.Config.CloudEvents) carries its id as
// ce_id instead: no event_id header is added, so the record's headers are
// exactly the Kafka binding's (binary content mode), and the subscriber takes
// the UUID from ce_id.
//
// Delivery is at least once. kafka-go's writer retries a produce request
// itself, up to [PublisherConfig.MaxAttempts], before Publish returns; a
// request that timed out may have been written all the same, and its retry
// then writes its records twice (kafka-go has no idempotent producer), as
// does the relay's own retry of a publish reported failed. Each retried
// attempt is logged at WARN ("kafka-go writer error"); consumers apply each
// event once through the inbox (runtime/consumer).
//
// Errors from kafka-go are wrapped with %w, so callers can use errors.As with
// kafka-go's WriteErrors (some partitions failed) and MessageTooLargeError
// (a value type, not a pointer: a message exceeds
// [PublisherConfig.BatchBytes] and nothing was written).
//
// # Error classes
//
// [Publisher.Publish] classes each failure, per message when kafka-go
// reports per partition, so that the outbox store knows whether to count it
// toward parking the message (sqlstore.StoreConfig.MaxAttempts):
//
//   - Permanent ([runtime.PermanentError]; parked at once): a record larger
//     than BatchBytes or the broker's limit (MESSAGE_TOO_LARGE,
//     RECORD_LIST_TOO_LARGE), an invalid topic name.
//   - Transient ([runtime.TransientError]; retried, never counted): every
//     Kafka error code kafka-go classes as retriable (kafka.Error's
//     Temporary: NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE,
//     REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
//     NETWORK_EXCEPTION, KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION (a
//     topic not created yet), THROTTLING_QUOTA_EXCEEDED, ...) except
//     CORRUPT_MESSAGE; a lost or refused connection, a network timeout, an
//     EOF; a write stopped by its context (the relay's publish deadline).
//   - Anything else (INVALID_RECORD, CORRUPT_MESSAGE, an error kafka-go
//     does not name) is counted: a message that keeps failing for a reason
//     nobody classified is parked at MaxAttempts, the safe default for a
//     poison message.
//
// # Topics
//
// The publisher does not create topics: create each first with the
// partitions your consumers need (kafka-topics.sh --create --topic order
// --partitions 8 --bootstrap-server 127.0.0.1:9092), or set
// [PublisherConfig.AllowAutoTopicCreation] to take the broker's defaults.
// Until the topic exists the relay logs a Warn line per attempt (Unknown
// Topic Or Partition (create the topic ..., or set
// kafka.PublisherConfig.AllowAutoTopicCreation)) and the events wait in the
// outbox; a [Subscriber] creates the topics it subscribes to. A dead-letter
// topic gets a message only when one fails for good, so nothing else
// creates it: give the dead-letter publisher AllowAutoTopicCreation (as
// examples/readme/billing does) or create it.
//
// # Subscribing
//
// [NewSubscriber] joins a consumer group ([SubscriberConfig.ConsumerGroup]).
// Each [Subscriber.Subscribe] call is one group member that delivers the
// partitions assigned to it in parallel, each one message at a time: a
// partition's next message is sent only after its current one is acked or
// nacked, so each partition (each key, each aggregate) keeps its order,
// a Watermill router handles up to one message per partition at once, and
// a message that is not acked holds back only its partition. Ack commits
// the offset; Nack delivers the same record again. Delivery is at least
// once: after a crash or a rebalance, messages that were handled but not
// yet committed are delivered again, with the same UUID.
//
// [Subscriber.SubscribePartitions] goes further: a stream per partition
// that hands out up to [SubscriberConfig.PartitionWindow] messages before
// the first is acked, for readers that apply a partition's messages in
// batches (runtime/consumer's Consumer.Run). In both, each assigned
// partition is fetched by a kafka-go Reader of its own (the member joins
// the group with a kafka-go ConsumerGroup), and acks are committed in
// offset order in the background, each partition's highest ack in one
// call. With [SubscriberConfig.SerialPartitions] a subscription delivers
// one message at a time across all its partitions instead, on one
// kafka-go Reader, committing each ack before it sends the next message.
//
// # Testing
//
// Package [github.com/gooutbox/outbox/adapters/kafka/kafkatest] starts an
// in-process Kafka-protocol cluster (franz-go's kfake), or returns the brokers
// named by OUTBOX_TEST_KAFKA_BROKERS.
//
// # Broker URL
//
// Importing the package registers kafka:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openKafka (go doc -u).
//
// # Tests
//
// The tests named here, and all but the package-internal ones, are in the
// folder internal/coretest/kafka, in a module
// of their own: they need an in-process Kafka, which this module
// does not require (see package runtime/runtimetest, "Running the
// repository's tests").
package kafka
