package relay

import "errors"

// ErrRunning is returned by [Relay.Run] when another call to Run on the same
// [Relay] has not returned yet.
var ErrRunning = errors.New("relay: already running")

// ErrInvalidConfig is wrapped by the errors [Config.Validate] and [New] return
// for a configuration they reject (a negative duration, MinBackoff greater
// than MaxBackoff, ...). The error text names the offending field.
var ErrInvalidConfig = errors.New("relay: invalid config")

// errPublishDeadline is the cause of the context a batch is published with
// when [Config.PublishTimeout] or the hand-over time runs out.
var errPublishDeadline = errors.New("relay: publish deadline exceeded (PublishTimeout or HandOverAfter)")

// errLeaseEnded is the cause of the context a batch is published with when
// its lease ([Batch.Deadline]) runs out first: the relay stops publishing
// it, and the adapters stop every write of it (another relay may publish
// the same messages from then on).
var errLeaseEnded = errors.New("relay: the lease ended during the publish")

// errShutdownTimeout is the cause of the context handed to the store and the
// publisher when [Config.ShutdownTimeout] expires during shutdown.
var errShutdownTimeout = errors.New("relay: shutdown timeout exceeded")

// errLeaseLost is the cause of the context a batch is published with when
// the store reports, through [Batch.Lost], that the relay's right to
// publish it ended before its deadline.
var errLeaseLost = errors.New("relay: lease lost (the store reported the batch's lease ended early)")
