package nats

import (
	"errors"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrInvalidConfig is wrapped by the errors of [PublisherConfig.Validate],
// [SubscriberConfig.Validate], [NewPublisher] and [NewSubscriber] when a
// setting is missing or out of range.
var ErrInvalidConfig = errors.New("nats: invalid config")

// ErrInvalidTopic is wrapped by the errors of [Publisher.Publish] and
// [Subscriber.Subscribe] when a topic is not a valid NATS subject to publish
// to: empty, with whitespace, an empty token ("a..b", a leading or trailing
// dot) or a wildcard token ("*" or ">"). Publish wraps it in a
// [runtime.PermanentError].
var ErrInvalidTopic = errors.New("nats: invalid topic")

// ErrPublisherClosed is returned by [Publisher.Publish] after
// [Publisher.Close] has been called.
var ErrPublisherClosed = errors.New("nats: publisher closed")

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] and
// [Subscriber.SubscribeInitialize] after [Subscriber.Close] has been called.
var ErrSubscriberClosed = errors.New("nats: subscriber closed")

// errEarlierFailed is the error of a message not sent because an earlier
// message of the same aggregate in the same Publish call failed: sending it
// would put it on the stream ahead of its predecessor.
var errEarlierFailed = errors.New("nats: not sent: an earlier message of the same aggregate failed")

// permanent reports whether a publish error is one that retrying cannot fix:
// a message larger than the server's max_payload (nats.ErrMaxPayload, raised
// by the client before sending), larger than the stream's max_msg_size
// (JetStream error 10054), or a topic that is not a valid subject.
func permanent(err error) bool {
	if errors.Is(err, natsgo.ErrMaxPayload) || errors.Is(err, natsgo.ErrBadSubject) ||
		errors.Is(err, ErrInvalidTopic) {
		return true
	}
	var jsErr jetstream.JetStreamError
	if errors.As(err, &jsErr) && jsErr.APIError() != nil {
		return jsErr.APIError().ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
	}
	return false
}
