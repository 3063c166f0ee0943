package runtime

import (
	"errors"
	"fmt"
)

// PermanentError marks a failure that retrying cannot fix, so the message is
// set aside at once instead of retried: a message the broker will never take
// (larger than it allows, an invalid topic), which broker adapters report
// and the outbox store parks; or an event a consumer's handler rejects for
// good, which package runtime/consumer dead-letters without retrying.
type PermanentError struct {
	// Err is the underlying error.
	Err error
}

// Error returns Err's message, marked permanent.
func (e *PermanentError) Error() string { return "outbox: permanent failure: " + e.Err.Error() }

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err in a [*PermanentError]; Permanent(nil) returns nil.
// errors.Is and errors.As see through the wrapper.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is, or wraps, a [*PermanentError].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// PublishErrors reports a Publish call that failed for some of its messages
// only: element i is the error of the i-th message passed to Publish, nil
// for a message the broker acknowledged. Broker adapters return it (wrapped
// or not) when they know per message what happened, as adapters/kafka does
// for a write that failed on some partitions; the relay then marks exactly
// the acknowledged messages and retries only the others. An element may be
// a [*PermanentError].
//
// A publisher that returns it must not write a message after an earlier
// message of the same aggregate (the aggregate_id metadata) in the call
// failed, as the adapters in adapters/ do not: the relay cannot take back
// a message the broker holds, so the aggregate would be out of order on
// the broker (the relay logs it at Warn when it sees one).
//
// An element may also be a [*TransientError]: the broker, not the message,
// failed (a partition without a leader, say), and the store retries the
// message without counting the attempt toward parking it.
type PublishErrors []error

// Error summarises the failures: how many messages failed and the first error.
func (e PublishErrors) Error() string {
	n, first := 0, error(nil)
	for _, err := range e {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if first == nil {
		return "outbox: publish: no message failed"
	}
	return fmt.Sprintf("outbox: publish: %d of %d messages failed: %v", n, len(e), first)
}

// Unwrap returns the errors of the messages that failed, so errors.Is and
// errors.As see them: a PublishErrors of one message is permanent when that
// message's error is.
func (e PublishErrors) Unwrap() []error {
	var errs []error
	for _, err := range e {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
