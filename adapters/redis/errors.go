package redis

import (
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// ErrInvalidConfig is wrapped by the errors of [PublisherConfig.Validate],
// [SubscriberConfig.Validate], [NewPublisher] and [NewSubscriber] when a
// setting is missing or out of range.
var ErrInvalidConfig = errors.New("redis: invalid config")

// ErrPublisherClosed is returned by [Publisher.Publish] after
// [Publisher.Close] has been called.
var ErrPublisherClosed = errors.New("redis: publisher closed")

// ErrMessageTooLarge is wrapped by the error of a message whose encoded
// payload and metadata exceed [PublisherConfig.MaxMessageBytes]. It is
// permanent.
var ErrMessageTooLarge = errors.New("redis: message too large")

// errEarlierFailed is the error of a message not sent because an earlier
// message of the same aggregate in the same Publish call failed before it
// was sent.
var errEarlierFailed = errors.New("redis: not sent: an earlier message of the same aggregate failed")

// permanent reports whether a publish error is one that retrying cannot fix:
// WRONGTYPE (the topic's key holds something other than a stream), a
// message above MaxMessageBytes or the server's proto-max-bulk-len, or a
// message whose metadata cannot be encoded. OOM (maxmemory reached), LOADING,
// BUSY, connection errors and timeouts are retryable.
func permanent(err error) bool {
	if errors.Is(err, ErrMessageTooLarge) || errors.Is(err, errMarshal) {
		return true
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "WRONGTYPE") ||
		strings.Contains(msg, "exceeds maximum allowed size") || // string > proto-max-bulk-len
		strings.Contains(msg, "invalid bulk length")
}

// errMarshal wraps the errors of the message marshaller.
var errMarshal = errors.New("redis: cannot encode message")
