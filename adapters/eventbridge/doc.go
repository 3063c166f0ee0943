// Package eventbridge publishes outbox events to Amazon EventBridge, with
// the AWS SDK for Go v2 (service/eventbridge): [Publisher] is a Watermill
// publisher for the relay, and importing the package registers the
// eventbridge:// URL scheme with package adapters/broker (`outbox relay
// --broker eventbridge:///shop`).
//
// # Mapping
//
// Each message is one PutEvents entry on [PublisherConfig.EventBus]:
//
//   - Source: the topic (the outbox's default topic is the aggregate type),
//     or [PublisherConfig.Source];
//   - DetailType: the event type (orders.order_paid), or
//     [PublisherConfig.DetailType];
//   - Time: the event's occurred_at;
//   - Detail: a JSON object with the event's id, type, version, aggregate,
//     occurred_at, topic and metadata beside its payload under "data"
//     ([DetailEnvelope]), or the payload alone ([DetailPayload]).
//
// A rule matches on any of them, for example
//
//	{"source": ["order"], "detail-type": ["orders.order_paid"], "detail": {"aggregate_type": ["order"]}}
//
// # What holds, and what does not
//
//   - Delivery: at least once. The relay publishes an event again after an
//     ambiguous failure (a timeout after EventBridge accepted it), and
//     EventBridge delivers to targets at least once: consumers
//     de-duplicate by the detail's "id", the outbox event id (package
//     runtime/consumer's inbox does, from a target queue).
//   - Order: none. EventBridge keeps no order, not even between the entries
//     of one request, and this publisher cannot restore it. A consumer that
//     needs each aggregate's events in order gets them through an SQS FIFO
//     queue as the rule's target, with the aggregate as message group: an
//     input path of $.detail.aggregate_id for the target's MessageGroupId,
//     and $.detail.id for its deduplication; SQS FIFO then hands each
//     group's events out in the order they reached the queue, which is
//     still not the commit order when EventBridge reordered them (the
//     consumer's version checks, or a sequence in the payload, are then the
//     only guard).
//   - De-duplication: none by EventBridge.
//   - Errors, per message: [Publisher.Publish] reports EventBridge's answer
//     for each entry in a runtime.PublishErrors, so the relay retries only
//     the refused messages: throttling and internal failures (and codes this
//     package does not know) are retryable; a malformed detail, an argument
//     EventBridge refuses, and an entry over 256 KiB ([ErrMessageTooLarge],
//     checked before sending) are permanent and parked. A failure of the
//     whole request (network, credentials, permissions, a missing bus) is
//     retryable for every message not yet accepted: an operator fixes it and
//     nothing is lost.
//   - Limits: requests of at most 10 entries and 256 KiB ([MaxEntries],
//     [MaxRequestSize], counted as [EntrySize] counts), one at a time, in
//     order.
//   - Fencing: by deadline only. The relay's batch deadline is the request's
//     context; a request already sent when a relay is paused past its lease
//     may still land after its successor's.
//
// The broker has no subscriber ([ErrNoSubscriber]): consume from the rule's
// target, an SQS queue with sqs://.
//
// # Testing
//
// Package eventbridgetest is an in-process PutEvents endpoint written to the
// API reference (validation, per-entry results, fault injection); the tests
// run against it, and against a real endpoint (LocalStack, or AWS) when
// OUTBOX_TEST_EVENTBRIDGE_ENDPOINT is set. What only the fake has tested:
// the rule matching and target delivery above are not exercised at all
// (the fake has no rules or targets); the per-entry error codes are those
// the API reference names, injected.
package eventbridge
