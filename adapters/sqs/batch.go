package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
	"github.com/gooutbox/outbox/runtime"
)

const (
	// maxBatchEntries is SQS's and SNS's limit on entries per batch request.
	maxBatchEntries = 10
	// DefaultMaxMessageBytes is the default limit on one message and on one
	// batch request: 256 KiB, the limit of SNS and SQS's long-standing
	// default MaximumMessageSize.
	DefaultMaxMessageBytes = 256 * 1024
)

// entry is one message prepared for a batch request.
type entry struct {
	index int // in the Publish call
	msg   *message.Message
	enc   encoded
	group string
	dedup string
}

// entryResult is the outcome of one entry of a batch request: err nil when
// the service took it. senderFault marks an entry the service refused for
// good.
type entryResult struct {
	err         error
	senderFault bool
	// serverFault is set for an entry the service failed, not the
	// sender (SenderFault=false).
	serverFault bool
}

// entryFailure is one failed entry of a batch response.
type entryFailure struct {
	id, code, message *string
	senderFault       bool
}

// entryResults maps a batch response of n entries to one result per entry:
// successful ids to nil, failures to their error (prefixed with what, the
// request and its target), and an entry the response does not mention to
// a retryable error.
func entryResults(what string, n int, successful []*string, failed []entryFailure) []entryResult {
	results := make([]entryResult, n)
	seen := make([]bool, n)
	for _, id := range successful {
		if i, ok := entryIndex(id, n); ok {
			seen[i] = true
		}
	}
	for _, f := range failed {
		if i, ok := entryIndex(f.id, n); ok {
			seen[i] = true
			results[i] = entryResult{
				err:         fmt.Errorf("%s: %s: %s", what, aws.ToString(f.code), aws.ToString(f.message)),
				senderFault: f.senderFault,
				serverFault: !f.senderFault,
			}
		}
	}
	for i := range results {
		if !seen[i] {
			results[i] = entryResult{err: fmt.Errorf("%s: no result for entry %d", what, i)}
		}
	}
	return results
}

// sendFunc sends one batch request (at most 10 entries, at most the byte
// limit) and returns one result per entry, or an error for the whole request.
type sendFunc func(ctx context.Context, batch []*entry) ([]entryResult, error)

// groupFunc computes a message's group id.
type groupFunc func(topic string, msg *message.Message) (string, error)

// publishBatches sends msgs as batch requests of at most 10 entries and
// maxBytes bytes, one request at a time, in order, and returns nil when every
// message was taken, or a [runtime.PublishErrors] (wrapped) with one element
// per message. A message too large for maxBytes fails alone, permanently. A
// message of a group that has already failed in this call is not sent (it
// would overtake the failed one); it fails with errEarlierFailed. A request
// holds at most one message of each group: the service reports failures per
// entry, and a later entry of a group whose earlier entry failed in the
// same request would already be on the queue, ahead of the retry.
func publishBatches(ctx context.Context, pkg, topic string, msgs []*message.Message, groupID groupFunc, maxBytes int, send sendFunc) error {
	errs := make(runtime.PublishErrors, len(msgs))
	failedGroups := make(map[string]bool)
	failed := false
	fail := func(e *entry, err error) {
		errs[e.index] = err
		failedGroups[e.group] = true
		failed = true
	}

	var batch []*entry
	batchBytes := 0
	batchGroups := make(map[string]bool)
	var stopErr error // a request failed as a whole: nothing more is sent
	flush := func() {
		if len(batch) == 0 {
			return
		}
		defer func() {
			batch, batchBytes = batch[:0], 0
			clear(batchGroups)
		}()
		if stopErr != nil {
			for _, e := range batch {
				fail(e, stopErr)
			}
			return
		}
		results, err := send(ctx, batch)
		if err != nil {
			err = fmt.Errorf("%s: publish to %q: %w", pkg, topic, err)
			if permanentRequestError(err) {
				err = runtime.Permanent(err)
			}
			stopErr = err
			for _, e := range batch {
				fail(e, err)
			}
			return
		}
		for i, e := range batch {
			r := results[i]
			if r.err == nil {
				continue
			}
			err := fmt.Errorf("%s: publish to %q: %w", pkg, topic, r.err)
			switch {
			case r.senderFault:
				err = runtime.Permanent(err)
			case r.serverFault:
				err = runtime.Transient(err) // the service's own fault
			}
			fail(e, err)
		}
	}

	for i, msg := range msgs {
		group, err := groupID(topic, msg)
		if err != nil {
			errs[i] = runtime.Permanent(fmt.Errorf("%s: message %s: group id: %w", pkg, msg.UUID, err))
			failed = true
			continue
		}
		if !validID(group) {
			errs[i] = runtime.Permanent(fmt.Errorf("%s: message %s: invalid message group id %q (want 1 to 128 printable ASCII characters)", pkg, msg.UUID, group))
			failed = true
			failedGroups[group] = true
			continue
		}
		// A re-drive of a dead letter is not a duplicate of its event
		// (publishing.DedupID); the subscriber gives it its UUID back.
		e := &entry{index: i, msg: msg, group: group, dedup: fifoID(publishing.DedupID(msg)), enc: encode(msg)}
		if failedGroups[group] {
			errs[i] = fmt.Errorf("%s: message %s: %w", pkg, msg.UUID, errEarlierFailed)
			failed = true
			continue
		}
		if e.enc.size > maxBytes {
			fail(e, runtime.Permanent(fmt.Errorf("%s: message %s: %w: %d bytes (body and attributes), limit %d", pkg, msg.UUID, ErrMessageTooLarge, e.enc.size, maxBytes)))
			continue
		}
		if len(batch) == maxBatchEntries || batchBytes+e.enc.size > maxBytes || batchGroups[group] {
			flush()
			if failedGroups[group] {
				errs[i] = fmt.Errorf("%s: message %s: %w", pkg, msg.UUID, errEarlierFailed)
				failed = true
				continue
			}
		}
		batch = append(batch, e)
		batchBytes += e.enc.size
		batchGroups[group] = true
	}
	flush()
	if !failed {
		return nil
	}
	return fmt.Errorf("%s: publish %d messages to %q: %w", pkg, len(msgs), topic, errs)
}

// permanentRequestError reports whether a whole batch request failed in a way
// no retry fixes. The batch limits are checked before sending, so these mean
// a message the service refuses, not an outage.
func permanentRequestError(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "InvalidMessageContents", "InvalidParameterValue", "InvalidAttributeName", "InvalidAttributeValue",
		"ParameterValueInvalid", "InvalidBatchEntryId":
		return true
	}
	return false
}

// batchID is the Id of the i-th entry of a batch request.
func batchID(i int) string { return strconv.Itoa(i) }

// transient reports whether a publish error is the service's or the
// connection's rather than the message's: what the AWS SDK's default retry
// policy retries (throttling, a 5xx, a connection reset or timeout), or a
// network error.
func transient(err error) bool {
	return retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary ||
		publishing.ConnectionLost(err)
}
