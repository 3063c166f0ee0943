// Package servicebus publishes outbox events to Azure Service Bus and
// consumes them, with the Azure SDK for Go
// (sdk/messaging/azservicebus): [Publisher] and [Subscriber] are Watermill's
// publisher and subscriber, and importing the package registers the
// servicebus:// URL scheme with package adapters/broker.
//
// # Mapping
//
// A Watermill topic is a Service Bus queue or topic, and a consumer group
// one of the topic's subscriptions ([SubscriberConfig.Subscription]). Each
// event is one message: the aggregate id is its SessionID, the event id its
// MessageID, the event type its Subject, the metadata its application
// properties, the payload its body (ContentType application/json).
//
// # What holds
//
//   - Order per aggregate, on session-enabled queues and subscriptions:
//     Service Bus hands a session's messages out in the order they were
//     sent, to one receiver at a time. The publisher sends a Publish call's
//     messages in order, batch after batch, and sends none of an aggregate
//     after one of its messages failed; the subscriber delivers each
//     session's messages one at a time, renewing the session's lock while
//     it holds it, completes a message when it is acked, and delivers a
//     nacked one again (after NackResendSleep) before the session's later
//     messages, without abandoning it: a handler failing for a while does
//     not raise its delivery count towards the entity's dead-letter
//     queue. What it received and did not complete when it stops is
//     abandoned, in order, for the session's next holder.
//   - Duplicates: the relay publishes at least once. With duplicate
//     detection on the entity, Service Bus drops a repeat of a MessageID
//     (the event id) within its window; the inbox of package
//     runtime/consumer drops the rest.
//   - Errors: a batch is accepted or refused whole. A refused one (an
//     outage, credentials, a missing entity) fails it and every later
//     message, retryably. A message larger than a batch may be is sent
//     on its own; one the entity refuses for its size
//     ([ErrMessageTooLarge]), or whose aggregate id is longer than a
//     session id may be ([ErrInvalidSessionID]), fails alone, for good.
//     Errors are reported per message in a runtime.PublishErrors.
//   - Fencing: by deadline only, as EventBridge and SQS.
//
// # Testing
//
// There is no Service Bus emulator on the project's machines. Package
// servicebustest is an in-process fake of the entities behind this
// package's [Client], [Sender] and [SessionReceiver] interfaces (sessions,
// locks, batches with a size limit, topics with subscriptions, abandon and
// complete), and the tests run against it. TestRealNamespace runs against
// a real namespace when OUTBOX_TEST_SERVICEBUS_CONNECTION and
// OUTBOX_TEST_SERVICEBUS_TOPIC are set; it has not been run by the project
// (no namespace was at hand), so the SDK wrappers ([SDKClient],
// [NewSDKClient]) and the servicebus:// opener beyond parsing are untested
// against the service. The conformance suite (package adapters/adaptertest)
// runs relays as processes, which an in-process fake cannot serve: it has
// not run either.
package servicebus
