// Package sqs is a Watermill [message.Publisher] and [message.Subscriber]
// for Amazon SQS FIFO queues, with an SNS FIFO publisher for fan-out, built
// on the AWS SDK for Go v2.
//
// It is a broker adapter of the outbox relay: the relay publishes outbox
// rows through a [Publisher] (SQS) or an [SNSPublisher] (SNS), and
// consumers read them back with a [Subscriber]. Watermill's own AWS adapter
// is not used.
//
// # Topics, queues, groups
//
// A Watermill topic maps to the SQS FIFO queue [QueueName](topic) or the
// SNS FIFO topic [TopicName](topic): "<topic>.fifo", with every character
// other than ASCII letters, digits, '-' and '_' replaced by '_'. A topic
// that maps to no valid name (empty, or longer than 80 characters for a
// queue, 256 for a topic) fails Publish permanently.
//
// SQS queues have no consumer groups: all subscribers of a queue compete
// for its messages. For groups, publish with [SNSPublisher] and subscribe
// with [SubscriberConfig.ConsumerGroup]: each group reads its own SQS FIFO
// queue, [GroupQueueName](topic, group), subscribed to the SNS FIFO topic
// with raw message delivery ([EnsureGroupQueue] wires it, and
// [SubscriberConfig.CreateQueue] makes the subscriber call it). A group
// receives only what is published after its subscription exists.
//
// # Ordering and deduplication
//
// Every message gets a MessageGroupId, by default its aggregate_id metadata
// ([AggregateGroupID]; the topic for a message without one), and its UUID
// (the outbox event id) as MessageDeduplicationId. A FIFO queue hands out a
// group's messages in the order they were sent, and none while an earlier
// one of the group is in flight, so each aggregate's events are consumed in
// order even by competing consumers. SQS (and SNS FIFO) drop a message
// whose deduplication id they have seen in the last 5 minutes: a relay's
// republish after an ambiguous failure within that window is not delivered
// twice, but one after 5 minutes is, so consumers still deduplicate by
// event id (package runtime/consumer's inbox does). A dead letter published
// again (its metadata carries runtime/consumer's outbox_dlq_at) is not a
// duplicate of its event: its deduplication id is its UUID, "/dlq/" and
// that time, and the subscriber hands it out with its UUID; the same
// re-drive twice within the window is delivered once.
//
// Publish sends SendMessageBatch (PublishBatch) requests of at most 10
// entries and 256 KiB, one at a time, in order, with at most one message of
// a group per request. Once a message fails, the later messages of its
// group in the same call are not sent, so a retry never lands behind them.
//
// # Errors
//
// Publish returns nil only when the service has stored every message. When
// some fail, the error wraps a [runtime.PublishErrors] with one element per
// message. Permanent ([runtime.PermanentError]): a message larger than
// [PublisherConfig.MaxMessageBytes] (256 KiB, counted as SQS does: body
// plus attribute names, types and values), an entry the service refused as
// the sender's fault (SenderFault=true), an invalid group id, a topic that
// maps to no valid name, and a whole request refused as invalid
// (InvalidParameterValue, InvalidMessageContents, ...). Everything else is
// retryable: throttling, service errors, network errors, a missing queue
// when CreateQueue is off, and the messages held back behind a failed one.
//
// # Message format
//
// The body is the payload when it is valid UTF-8 made of characters SQS
// allows, as JSON payloads are. Otherwise it is the payload in standard base64,
// and the attribute [AttrBody] says "base64"; an empty payload travels as
// the body "-" with [AttrBody] "empty". Metadata travels as String message
// attributes of the same names when they fit: at most 10 attributes in all
// (SQS's limit, [AttrBody] included), valid attribute names (letters,
// digits, '_', '-', '.'; no "AWS." or "Amazon." prefix), non-empty values.
// The outbox envelope's metadata (event_id, event_type, event_version,
// aggregate_type, aggregate_id, occurred_at, and up to three of
// correlation_id, traceparent, tracestate) fits. Otherwise all metadata
// travels as one JSON object in the attribute [AttrMetadata]. The
// subscriber undoes both. A received message's UUID is its
// MessageDeduplicationId, else its event_id metadata, else the SQS
// MessageId.
//
// # Subscribing
//
// A subscription long-polls its queue (ReceiveMessage, up to 10 messages,
// 20s wait by default) and hands the messages out one at a time, in the
// order received: the next only after the current one is acked or nacked.
// Ack deletes the message. Nack makes it visible again
// (ChangeMessageVisibility to [SubscriberConfig.NackDelay], 0 by default),
// together with the not yet delivered messages of the same receive, so the
// FIFO queue delivers the group again from the nacked message. Delivery is
// at least once: a message whose delete fails, or whose handler outlives
// the visibility timeout, is delivered again with the same UUID. Close (or
// the end of the Subscribe context) waits for a ReceiveMessage call in
// progress, up to [SubscriberConfig.WaitTime], and makes what it returns
// visible again: SQS would otherwise hide those messages, and block their
// groups, for the visibility timeout.
//
// # Configuration
//
// [ClientConfig] says how to reach AWS: by default the SDK's default chain
// (environment, shared config files, SSO, container and instance roles);
// Region and Endpoint (for LocalStack or package sqstest) override it; an
// aws.Config or ready-made clients ([SQSAPI], [SNSAPI]) are the escape
// hatches. Queues and topics are created only when asked
// ([PublisherConfig.CreateQueue], [SubscriberConfig.CreateQueue]; the SNS
// publisher resolves ARNs with the idempotent CreateTopic unless
// [SNSPublisherConfig.TopicARN] is set), as FIFO with
// ContentBasedDeduplication=false.
//
// # Testing
//
// Package [github.com/gooutbox/outbox/adapters/sqs/sqstest] runs an
// in-process fake of the SQS and SNS APIs, or returns the endpoint named by
// OUTBOX_TEST_SQS_ENDPOINT.
//
// # Error classes
//
// Beside the permanent failures above, [Publisher.Publish] and
// [SNSPublisher.Publish] mark as transient ([runtime.TransientError]:
// retried without counting an attempt toward
// sqlstore.StoreConfig.MaxAttempts) a batch entry the service failed
// (SenderFault=false), a request error the AWS SDK's default retry policy
// retries (throttling, a 5xx, a connection reset or timeout), and network
// errors. Anything else counts toward MaxAttempts: an unknown failure that
// repeats is treated as the message's.
//
// # Broker URL
//
// Importing the package registers sqs:// and sns:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openSQS and openSNS (go doc -u).
//
// The package is a module of its own (go get
// github.com/gooutbox/outbox/adapters/sqs), so that a program that does
// not use it does not require its client.
package sqs
