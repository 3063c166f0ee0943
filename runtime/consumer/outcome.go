package consumer

import (
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// Metadata keys that a consumer adds to a message it publishes to the
// dead-letter topic. The message keeps its UUID (the event id), its payload
// and all of its original metadata, so re-driving it later is a plain
// publish to the original topic.
const (
	// MetadataDeadLetterReason is the [Reason], e.g. "handler".
	MetadataDeadLetterReason = "outbox_dlq_reason"
	// MetadataDeadLetterError is the error text that made the consumer give
	// up on the message.
	MetadataDeadLetterError = "outbox_dlq_error"
	// MetadataDeadLetterTopic is the topic the message was consumed from,
	// when the consumer runs in a Watermill router ("" otherwise).
	MetadataDeadLetterTopic = "outbox_dlq_topic"
	// MetadataDeadLetterConsumer is the consumer's [Config.Name].
	MetadataDeadLetterConsumer = "outbox_dlq_consumer"
	// MetadataDeadLetterAttempts is how many times the handler ran before
	// the message was dead-lettered ("0" when it never ran).
	MetadataDeadLetterAttempts = "outbox_dlq_attempts"
	// MetadataDeadLetterAt is when the message was dead-lettered, RFC 3339
	// with nanoseconds, UTC.
	MetadataDeadLetterAt = "outbox_dlq_at"
)

// Outcome is what a consumer did with one delivery of a message. Every
// delivery ends with exactly one outcome, reported to [Config.OnOutcome].
type Outcome int

const (
	// OutcomeApplied: the handler ran and, with the inbox, its transaction
	// committed together with the inbox marker. The message is acked.
	OutcomeApplied Outcome = iota + 1
	// OutcomeDuplicate: the inbox already held the event id, so nothing
	// ran and nothing was committed. The message is acked.
	OutcomeDuplicate
	// OutcomeIgnored: the registry knows the event type but the consumer
	// has no handler for it. The message is acked.
	OutcomeIgnored
	// OutcomeSkipped: the event type is unknown to the registry and
	// [Config.UnknownType] is [ActionSkip]. The message is acked.
	OutcomeSkipped
	// OutcomeNacked: an unknown version (or type) whose policy is
	// [ActionNack]. The message is nacked after [Config.NackDelay] and
	// delivered again; a newer deployment of the consumer will apply it.
	OutcomeNacked
	// OutcomeDeadLettered: the message was published to the dead-letter
	// topic with the reason, then acked.
	OutcomeDeadLettered
	// OutcomeFailed: the message could not be applied nor dead-lettered
	// (the inbox transaction failed, the handler kept failing and no
	// dead-letter publisher is configured, the dead-letter publish failed,
	// the message's context was cancelled). The message is nacked and
	// delivered again.
	OutcomeFailed
)

var outcomeNames = [...]string{
	OutcomeApplied:      "applied",
	OutcomeDuplicate:    "duplicate",
	OutcomeIgnored:      "ignored",
	OutcomeSkipped:      "skipped",
	OutcomeNacked:       "nacked",
	OutcomeDeadLettered: "dead_lettered",
	OutcomeFailed:       "failed",
}

// String returns the outcome's snake_case name ("applied", "duplicate",
// "dead_lettered", ...), suitable as a metric label.
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Acked reports whether a delivery with this outcome is acked (true) or
// nacked (false).
func (o Outcome) Acked() bool {
	switch o {
	case OutcomeApplied, OutcomeDuplicate, OutcomeIgnored, OutcomeSkipped, OutcomeDeadLettered:
		return true
	}
	return false
}

// Reason says why a message was not applied. It is empty for the outcomes
// applied, duplicate and ignored, and is the value of
// [MetadataDeadLetterReason] on dead-lettered messages.
type Reason string

// The reasons a message is not applied.
const (
	// ReasonMalformed: the message lacks a wire-contract key or carries a
	// malformed one (see [runtime.EnvelopeFromMetadata]).
	ReasonMalformed Reason = "malformed"
	// ReasonUnknownType: the registry does not know the event type.
	ReasonUnknownType Reason = "unknown_type"
	// ReasonUnknownVersion: the registry knows the type but not the
	// version, usually a newer one ([runtime.UnknownVersionError.Newer]).
	ReasonUnknownVersion Reason = "unknown_version"
	// ReasonDecode: the payload does not decode into its (type, version)
	// or fails validation ([runtime.DecodeError]).
	ReasonDecode Reason = "decode"
	// ReasonHandler: the handler kept failing ([HandlerError]).
	ReasonHandler Reason = "handler"
	// ReasonInbox: the inbox transaction failed ([InboxError]).
	ReasonInbox Reason = "inbox"
	// ReasonMismatch: the decoded Go type is not the handler's
	// ([ErrTypeMismatch]).
	ReasonMismatch Reason = "type_mismatch"
	// ReasonCanceled: the message's context was cancelled (shutdown).
	ReasonCanceled Reason = "canceled"
)

// Meta describes the message an event arrived in. Handlers receive it next
// to the decoded event.
type Meta struct {
	// Envelope is the message as received: event id, type, the version on
	// the wire (before upcasting), aggregate, occurred_at, headers
	// (correlation id, trace context, ...) and the raw payload.
	runtime.Envelope
	// Topic is the topic the message was consumed from, when the consumer
	// runs in a Watermill router or [Consumer.Run]; "" otherwise.
	Topic string
	// Attempt is 1 on the first run of the handler for this delivery and
	// counts up with each retry.
	Attempt int
}

// Result describes one delivery for [Config.OnOutcome].
type Result struct {
	// Outcome is what the consumer did.
	Outcome Outcome
	// Reason says why the message was not applied; empty for applied,
	// duplicate and ignored.
	Reason Reason
	// MessageUUID is the Watermill message UUID.
	MessageUUID string
	// Meta describes the message; its Envelope is partly empty for a
	// malformed message. Meta.Attempt is the number of handler runs (0
	// when the handler never ran).
	Meta Meta
	// Err is the error behind a skipped, nacked, dead-lettered or failed
	// message: a [*runtime.UnknownEventTypeError], a
	// [*runtime.UnknownVersionError], a [*runtime.DecodeError], a
	// [*HandlerError], an [*InboxError], ... It is nil otherwise.
	Err error
	// Duration is how long the delivery took, retries, backoff and
	// [Config.NackDelay] included; for a message applied in a batch, how
	// long the batch's transaction took.
	Duration time.Duration
	// Batch is how many messages were applied in the transaction of this
	// one: more than 1 for a message applied in a batch by [Consumer.Run]
	// ([Config.BatchSize]) or with others by [Consumer.HandlerFunc]
	// ([Config.MaxTransactions]), 1 otherwise.
	Batch int
}
