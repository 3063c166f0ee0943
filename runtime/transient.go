package runtime

import "errors"

// TransientError marks a failure of the broker rather than of the message:
// the broker said so (a Kafka error code it classes as retriable, a leader
// election, a request timed out) or the connection to it was lost. Broker
// adapters wrap such errors, per message in a [PublishErrors] or for a
// whole Publish call, and the outbox store then retries the message
// without counting the attempt toward its parking limit
// (sqlstore.StoreConfig.MaxAttempts): a leader election that lasts longer
// than MaxAttempts retries never parks a healthy message. An error that is
// neither transient nor a [*PermanentError] counts: a message that keeps
// failing for a reason nobody classified is set aside at MaxAttempts, as
// a poison message should be.
//
// A [*PermanentError] wins over a TransientError anywhere in the same
// error tree.
type TransientError struct {
	// Err is the underlying error.
	Err error
}

// Error returns Err's message, marked transient.
func (e *TransientError) Error() string { return "outbox: transient failure: " + e.Err.Error() }

// Unwrap returns Err.
func (e *TransientError) Unwrap() error { return e.Err }

// Transient wraps err in a [*TransientError]; Transient(nil) returns nil.
// errors.Is and errors.As see through the wrapper.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err}
}

// IsTransient reports whether err is, or wraps, a [*TransientError] and is
// not permanent ([IsPermanent]). For a [PublishErrors], which wraps the
// errors of several messages, it reports whether any of them is transient;
// ask per message instead.
func IsTransient(err error) bool {
	var t *TransientError
	return errors.As(err, &t) && !IsPermanent(err)
}
