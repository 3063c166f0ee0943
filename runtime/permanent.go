package runtime

import "errors"

// PermanentError marks a publish failure that retrying cannot fix: the
// broker will never take the message (it is larger than the broker allows,
// its topic name is invalid, ...). Broker adapters wrap such errors in it;
// the relay and the outbox store then park the message at once instead of
// retrying it, so it stops holding its aggregate back.
type PermanentError struct {
	// Err is the publisher's error.
	Err error
}

func (e *PermanentError) Error() string { return "outbox: permanent publish failure: " + e.Err.Error() }

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err is, or wraps, a [*PermanentError].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
