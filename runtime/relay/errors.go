package relay

import (
	"errors"
	"fmt"

	"github.com/gooutbox/outbox/runtime"
)

// ErrRunning is returned by [Relay.Run] when another call to Run on the same
// [Relay] has not returned yet.
var ErrRunning = errors.New("relay: already running")

// ErrInvalidConfig is wrapped by the errors [Config.Validate] and [New] return
// for a configuration they reject (a negative duration, MinBackoff greater
// than MaxBackoff, ...). The error text names the offending field.
var ErrInvalidConfig = errors.New("relay: invalid config")

// errShutdownTimeout is the cause of the context handed to the store and the
// publisher when [Config.ShutdownTimeout] expires during shutdown.
var errShutdownTimeout = errors.New("relay: shutdown timeout exceeded")

// PublishError reports the messages of one topic that the publisher did not
// accept. The relay's [PublishFunc] returns one PublishError per failed topic,
// joined with [errors.Join]; the store wraps them into the error [Store.Claim]
// returns, so errors.As finds the first one and errors.Is finds Err.
type PublishError struct {
	// Topic is the topic Publish was called with.
	Topic string
	// IDs are the outbox IDs of the messages that were not published, in
	// ID order.
	IDs []int64
	// Err is what the publisher returned, or the context's cause when the
	// relay stopped waiting for it (see [Config.ShutdownTimeout]).
	Err error
}

// Error returns the message, naming the topic.
func (e *PublishError) Error() string {
	return fmt.Sprintf("relay: publish %d messages to topic %q: %v", len(e.IDs), e.Topic, e.Err)
}

// Unwrap returns Err.
func (e *PublishError) Unwrap() error { return e.Err }

// FailedIDs returns IDs. Stores find which messages failed, and how, through
// this method and [PublishError.Permanent] without importing this package.
func (e *PublishError) FailedIDs() []int64 { return e.IDs }

// Permanent reports whether the publisher said retrying cannot help
// ([runtime.IsPermanent]): the first of IDs (the message that failed; the
// others of its aggregate only wait behind it) should be parked at once.
func (e *PublishError) Permanent() bool { return runtime.IsPermanent(e.Err) }
