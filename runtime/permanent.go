package runtime

import "errors"

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
