// Package nats is a Watermill [message.Publisher] and [message.Subscriber]
// for NATS JetStream, built on github.com/nats-io/nats.go's jetstream
// package and watermill-nats/v2's message format.
//
// It is a broker adapter of the outbox relay: the relay publishes outbox
// rows through a [Publisher], and consumers read them back with a
// [Subscriber]. It exists because watermill-nats, as configured by default,
// loses the outbox's guarantees: without AutoProvision every publish fails
// with "no response from stream"; a dotted topic ("orders.created") is not a
// valid stream name; without TrackMsgId nothing is deduplicated; the
// default duplicate window (2 minutes) can be shorter than the relay's retry
// delays; and publishes are awaited one at a time.
//
// # Streams
//
// A topic is a NATS subject ([Subject]: the topic itself, so "orders.created"
// works; a topic with whitespace, an empty token or a wildcard is rejected).
// Before the first publish to (or subscription on) a topic, the adapter asks
// the server which stream captures the subject. If a stream does, and it is
// not one the adapter named, it is used as it is: a stream created by hand
// or by the operations team, say with subjects "orders.>", keeps its
// settings. Otherwise the adapter creates its own stream, one per topic,
// named by [StreamName]: the prefix ([StreamConfig.Prefix], "OUTBOX"), the
// topic with the characters a stream name may not hold replaced by '_', and
// a short hash of the topic so that topics differing only in those
// characters get different streams. One stream per topic keeps the streams'
// subjects disjoint, so creating one never fails with overlapping subjects,
// and each topic's retention can be set apart. The publisher creates or
// updates its streams to the current settings; the subscriber only creates
// missing ones.
//
// Created streams use file storage, LimitsPolicy retention with no limits
// (set MaxAge or MaxBytes through [StreamConfig.Configure]; every group
// reads the whole stream, so a work-queue stream would not do), and a
// duplicate window ([StreamConfig.DedupWindow]) of 10 minutes.
//
// # Publishing
//
// [Publisher.Publish] sends every message with Nats-Msg-Id set to its UUID
// (the event id) and Nats-Expected-Stream set to the topic's stream, up to
// [PublisherConfig.MaxInFlight] at a time without waiting, then waits for
// each PubAck. It returns nil only when every message is acknowledged, that
// is stored (a PubAck with Duplicate set counts: the stream already had it).
// So a relay's republish of an event after an ambiguous failure is dropped
// by JetStream within the duplicate window, which must therefore be longer
// than the relay's longest retry delay.
//
// Errors are per message ([runtime.PublishErrors]). A message larger than
// the server's max_payload (nats.ErrMaxPayload) or the stream's max_msg_size,
// and a topic that is not a valid subject, are [runtime.Permanent]: the
// outbox parks them. Everything else (no responders, timeouts, a closed
// connection, a deleted stream, which is created again on the next publish)
// is retryable. When a message fails before it is sent, the later messages
// of its aggregate in the same call are not sent, so they cannot overtake it.
//
// # Subscribing
//
// [Subscriber] consumes through one durable pull consumer per consumer group
// and stream ([ConsumerName]), created on first subscription with explicit
// acks, delivery from the start of the stream, and MaxAckPending 1: the
// group handles one message at a time, in stream order, across all its
// members, and a nacked message comes again before anything after it. That
// is what keeps the order per aggregate; a larger
// [SubscriberConfig.MaxAckPending] trades it for throughput. A message being
// handled is kept alive with in-progress signals, so AckWait only bounds
// how soon the message of a crashed member is delivered again. Delivery is
// at least once; consumers deduplicate with the inbox.
//
// # Server restarts and outages
//
// The connections the adapter opens reconnect for ever,
// [PublisherConfig.ReconnectWait] (2s) apart (nats.go alone gives up after
// 60 attempts, about 2 minutes, and closes the connection for good). While
// a connection is not connected, [Publisher.Publish] fails at once with a
// retryable error wrapping nats.ErrConnectionReconnecting, instead of
// leaving the messages in nats.go's reconnect buffer and waiting
// [PublisherConfig.PublishTimeout] for PubAcks that a restarted server never
// sends; the relay retries after its backoff, and the outbox row stays
// pending meanwhile. A subscription makes no pull request while
// disconnected and resumes as soon as the connection is back. It also acks
// again the messages it acked within the last AckWait: a server killed
// right after an ack may restart without it, and would otherwise hold the
// group (MaxAckPending 1) until AckWait had passed. So after the server is
// back, publishing and consuming resume within about ReconnectWait, plus
// the relay's backoff for publishing.
//
// # Error classes
//
// [Publisher.Publish] classes each failure for the outbox store
// (sqlstore.StoreConfig.MaxAttempts): permanent ([runtime.PermanentError],
// parked at once) for a message larger than max_payload or the stream's
// max_msg_size and an invalid subject; transient
// ([runtime.TransientError], retried without counting an attempt) while
// the connection is not connected (reconnecting, disconnected, draining,
// closed, no servers), for no responders (no stream, or JetStream without
// a leader), a PubAck that timed out, a JetStream 503 API error, and
// network errors. Anything else counts toward MaxAttempts: an unknown
// failure that repeats is treated as the message's.
//
// # Broker URL
//
// Importing the package registers nats:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openNATS (go doc -u).
//
// The package is a module of its own (go get
// github.com/gooutbox/outbox/adapters/nats), so that a program that does
// not use it does not require its client.
package nats
