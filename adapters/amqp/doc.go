// Package amqp is a Watermill [message.Publisher] and [message.Subscriber]
// for RabbitMQ (AMQP 0-9-1) that cannot lose a message silently.
//
// It is the RabbitMQ adapter of the outbox relay: the relay publishes outbox
// rows through a [Publisher] and marks a row published only when Publish
// returns nil for it; consumers read them with a [Subscriber], directly or
// through a Watermill [message.Router]. The subscriber is watermill-amqp's,
// so programs that use watermill-amqp directly read what a Publisher writes
// (build their config with [Config.WatermillConfig]).
//
// # Why not watermill-amqp's publisher
//
// With watermill-amqp's NewDurableQueueConfig, the queue is declared by the
// subscriber. A message published before any subscriber ran goes to the
// default exchange, which routes it to no queue; the broker drops it and,
// with Publish.ConfirmDelivery, acknowledges it, so Publish returns nil and
// the relay marks it published: a silent loss of everything published before
// the first subscriber started. Publish.Mandatory does not help, because
// watermill-amqp ignores the broker's basic.return. (In pub/sub mode the same
// happens to every message published while no group has a queue.)
//
// # Publishing
//
// [Publisher.Publish] closes that hole in two ways:
//
//   - Before its first publish to a topic on a connection, it declares the
//     topic's topology with watermill-amqp's TopologyBuilder and the same
//     settings [NewSubscriber] uses: in [ModeQueue] (the default) the
//     topic's queue, so nothing is ever unroutable; in [ModePubSub] the
//     topic's fanout exchange and the queues of [Config.Groups].
//   - It publishes on a channel in confirm mode, with the mandatory flag,
//     and waits for every confirmation. A message the broker returns
//     (basic.return: no queue took it) fails with an [*UnroutableError]
//     naming the exchange and routing key, and the topology is declared
//     again on the next call. The error is permanent when the same call
//     declared the topology, and retryable when an earlier call did (the
//     queue was deleted or expired since; the retry declares it again).
//
// One Publish call publishes its messages in order on one channel, so the
// broker enqueues them in that order. The result is per message
// ([runtime.PublishErrors]), so the relay marks exactly the messages the
// broker took:
//
//   - confirmed (basic.ack) and not returned: published;
//   - returned unroutable: [*UnroutableError], permanent when the call
//     declared the topology, retryable otherwise;
//   - larger than the broker's max_message_size (RabbitMQ closes the
//     channel with 406 PRECONDITION_FAILED "message size N is larger than
//     configured max size M"): permanent ([ErrMessageTooLarge]); the
//     messages after it on the closed channel fail retryably;
//   - nacked by the broker (basic.nack: a full queue with
//     x-overflow=reject-publish, an internal error): retryable
//     ([ErrNacked]), since a queue drains and the message may fit later. A
//     message larger than a queue's x-max-length-bytes is nacked every time
//     and so is retried forever; keep such limits above the largest event;
//   - not confirmed because the channel or connection closed, or
//     [Config.ConfirmTimeout] passed: retryable and ambiguous
//     ([ErrUnconfirmed]); the broker may hold the message, so a retry may
//     deliver a duplicate with the same UUID. RabbitMQ has no publish-side
//     deduplication.
//
// A topic that cannot name a queue or exchange fails the whole call
// permanently ([ErrInvalidTopic]); a dial or declaration failure (including
// a queue that exists with other arguments: 406 inequivalent arg) fails it
// retryably. After a connection is lost, the next Publish dials again.
//
// Messages are marshaled by watermill-amqp's DefaultMarshaler (the UUID in
// the _watermill_message_uuid header, metadata as headers), with the
// message-id property set to the UUID and, unless [Config.NotDurable],
// persistent delivery mode into durable queues: a confirmed message has been
// written to disk and survives a broker restart.
//
// # Subscribing and order
//
// [NewSubscriber] wraps watermill-amqp's subscriber with the same topology:
// manual acknowledgement, prefetch [Config.PrefetchCount] (default 1), and
// queues declared with x-single-active-consumer, so that RabbitMQ delivers a
// queue to one consumer at a time while the others stand by. A queue keeps
// publish order towards a single consumer, and with prefetch 1 a nacked
// (requeued) message is delivered again before any later one, so events of
// an aggregate are handled in the order they were published, however many
// subscribers run (with classic queues; see Durability for quorum queues).
// [Config.CompetingConsumers] spreads a queue over all its
// consumers for throughput, and gives up that order: with several consumers
// or a larger prefetch, a requeued message comes back after later ones.
//
// # Modes and groups
//
// In [ModeQueue] a topic has one queue, named after it, and every subscriber
// of the topic shares it: one consumer group per topic. In [ModePubSub]
// each group has its own queue per topic ("<topic>_<group>") bound to the
// topic's fanout exchange. The publisher cannot know every group, so a group
// receives what is published after its queue exists: a group must declare
// its queue ([Subscriber.SubscribeInitialize] or Subscribe) before the events
// it must see are published, or be listed in the publisher's
// [Config.Groups]. A message that reaches no queue at all is never lost
// silently: it fails permanently and the relay parks it.
//
// # Durability
//
// By default exchanges and queues are durable and messages persistent. On a
// RabbitMQ cluster set [Config.Quorum]: quorum queues replicate each message
// to a majority of nodes before confirming it, so a confirmed message
// survives the loss of a node; classic queues live on one node. The queue
// type, like every queue argument, is fixed when the queue is first declared.
// A quorum queue does not put a nacked message back at the head: it comes
// back after later messages, so with quorum queues retry in the handler
// (Watermill's Retry middleware) instead of nacking when order matters.
//
// # Fencing
//
// A publish's frames reach the network only before the deadline of its
// messages' contexts (the relay gives them the end of its lease): the
// [Publisher]'s connection is fenced (package adapters/internal/fence), so
// a basic.publish, content header or body frame written after that
// deadline is refused and the connection aborted, and the broker never
// receives the message. A relay paused mid-publish that wakes after its
// lease ended thus never has a message reach the queue after its
// successor's messages of the same aggregate. When a call's context ends
// before the call does, its connection is aborted (SO_LINGER 0, dropping
// what the kernel still held to send) and the next Publish dials again.
// This holds on amqp:// URLs; on amqps:// amqp091 does the TLS above the
// connection, where the fence would see no frames, and the publisher
// relies on its context checks between messages only (use the inbox of
// package runtime/consumer, which applies each event once and in order).
//
// # Queues that already exist
//
// RabbitMQ refuses to redeclare a queue with other arguments, and declaring
// fails Publish (retryably: nothing is lost, but nothing goes out). Queues
// created by watermill-amqp's NewDurableQueueConfig or NewDurablePubSubConfig
// have no arguments, while this package declares x-single-active-consumer:
// either set [Config.CompetingConsumers] to use them as they are (and run a
// single subscriber per queue to keep order), or delete them once drained so
// that they are declared again.
//
// # Testing
//
// The tests run against the RabbitMQ at OUTBOX_TEST_AMQP_URI (default
// amqp://guest:guest@127.0.0.1:5672/) and skip when it does not answer,
// unless OUTBOX_TEST_REQUIRE_INTEGRATION=1.
//
// # Error classes
//
// [Publisher.Publish] classes each failure for the outbox store
// (sqlstore.StoreConfig.MaxAttempts): permanent ([runtime.PermanentError],
// parked at once) for a message returned unroutable after this call
// declared the topology, larger than the broker's max_message_size, or an
// invalid topic; transient ([runtime.TransientError], retried without
// counting an attempt) for a message not confirmed ([ErrUnconfirmed]: the
// channel or connection closed, [Config.ConfirmTimeout], the message's
// context ended), nacked ([ErrNacked]), a closed connection, a connection
// closed by the broker with connection-forced (320), resource-error (506)
// or internal-error (541), and network errors (refused, reset, timed out).
// Anything else, a returned message whose queue went away since an
// earlier declaration included, counts toward MaxAttempts: an unknown
// failure that repeats is treated as the message's.
//
// # Broker URL
//
// Importing the package registers amqp:// and amqps:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openAMQP (go doc -u).
//
// The package is a module of its own (go get
// github.com/gooutbox/outbox/adapters/amqp), so that a program that does
// not use it does not require its client.
package amqp
