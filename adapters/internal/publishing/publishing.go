// Package publishing holds what the broker adapters' publishers share: the
// context a Publish call runs under, and the key that groups a call's
// messages by aggregate. It is internal to package adapters and makes no
// compatibility promise.
package publishing

import (
	"context"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
)

// Context returns the context of a Publish call of msgs: it is done when the
// context of any message is done (the relay gives every message of a batch
// the batch's deadline), or, when timeout > 0, after timeout, with cause as
// its cause (context.DeadlineExceeded when cause is nil). It carries the
// values of the first message's context. Call the returned function when the
// call is over.
func Context(msgs []*message.Message, timeout time.Duration, cause error) (context.Context, context.CancelFunc) {
	parent := context.Background()
	if len(msgs) > 0 {
		parent = context.WithoutCancel(msgs[0].Context())
	}
	stopTimer := context.CancelFunc(func() {})
	if timeout > 0 {
		// A real deadline, not a timer: clients (go-redis, the AMQP and
		// NATS clients) read it to set their connections' deadlines.
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		parent, stopTimer = context.WithTimeoutCause(parent, timeout, cause)
	}
	ctx, cancelCause := context.WithCancelCause(parent)
	var stops []func() bool
	seen := map[<-chan struct{}]bool{}
	for _, msg := range msgs {
		mctx := msg.Context()
		done := mctx.Done()
		if done == nil || seen[done] {
			continue
		}
		seen[done] = true
		if mctx.Err() != nil {
			cancelCause(context.Cause(mctx))
			break
		}
		stops = append(stops, context.AfterFunc(mctx, func() { cancelCause(context.Cause(mctx)) }))
	}
	return ctx, func() {
		stopTimer()
		for _, stop := range stops {
			stop()
		}
		cancelCause(context.Canceled)
	}
}

// AggregateKey returns the key of msg's aggregate (its aggregate_type and
// aggregate_id metadata, or a CloudEvent's: [runtime.AggregateOf]), or ""
// when it has no aggregate id. A publisher that fails a message holds back
// the call's later messages with the same key, so that none overtakes it.
func AggregateKey(msg *message.Message) string {
	typ, id := runtime.AggregateOf(msg.Metadata)
	if id == "" {
		return ""
	}
	return typ + "\x00" + id
}

// DeadLetteredAt is the metadata key runtime/consumer sets on a message it
// dead-letters, to when it did (consumer.MetadataDeadLetterAt; a test checks
// the two agree).
const DeadLetteredAt = "outbox_dlq_at"

// DedupID returns the id under which a broker that deduplicates remembers
// msg: its UUID (the event id), so that the relay's republish of an event
// is dropped as a duplicate; but for a message that carries DeadLetteredAt
// (dead-lettered, and now published again from the dead-letter topic to be
// re-driven, or to the dead-letter topic itself) the UUID and that time,
// so that the re-drive is not dropped as a duplicate of the publish that
// failed, while a retried re-drive of the same dead letter still is.
func DedupID(msg *message.Message) string {
	if at := msg.Metadata.Get(DeadLetteredAt); at != "" {
		return msg.UUID + redriveSep + at
	}
	return msg.UUID
}

// redriveSep separates the UUID from the dead-letter time in a re-drive's
// DedupID.
const redriveSep = "/dlq/"

// UUIDOfDedupID returns the message UUID of a DedupID: id without its
// re-drive suffix, for brokers whose subscriber takes the UUID from the
// deduplication id (SQS FIFO).
func UUIDOfDedupID(id string) string {
	if uuid, _, ok := strings.Cut(id, redriveSep); ok && uuid != "" {
		return uuid
	}
	return id
}
