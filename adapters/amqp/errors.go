package amqp

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by the errors of [Config.Validate],
// [NewPublisher] and [NewSubscriber] when a setting is missing, out of range
// or inconsistent with the [Mode].
var ErrInvalidConfig = errors.New("amqp: invalid config")

// ErrAccessRefused is wrapped by the error of a dial the broker refused:
// a username or password it does not allow, a SASL mechanism it does not
// offer, or a vhost the user may not use (AMQP 403 ACCESS_REFUSED, 530
// NOT_ALLOWED). No retry mends it until the broker's users change;
// [Publisher.Connect] reports it at start.
var ErrAccessRefused = errors.New("amqp: broker refused the connection")

// ErrPublisherClosed is returned by [Publisher.Publish] after
// [Publisher.Close] has been called.
var ErrPublisherClosed = errors.New("amqp: publisher closed")

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] and
// [Subscriber.SubscribeInitialize] after [Subscriber.Close] has been called.
var ErrSubscriberClosed = errors.New("amqp: subscriber closed")

// ErrNacked is wrapped by the error [Publisher.Publish] reports for a
// message the broker negatively acknowledged (basic.nack): the broker did
// not take it, for example because a queue with x-overflow=reject-publish is
// full. It is retryable.
var ErrNacked = errors.New("amqp: broker nacked the message")

// ErrUnconfirmed is wrapped by the error [Publisher.Publish] reports for a
// message whose confirmation never arrived: the channel or connection closed,
// or [Config.ConfirmTimeout] or the message's context ended first. The broker
// may or may not hold the message, so it is retryable, and a retry may
// deliver a duplicate with the same UUID.
var ErrUnconfirmed = errors.New("amqp: publish not confirmed")

// ErrMessageTooLarge is wrapped by the permanent error [Publisher.Publish]
// reports for a message larger than the broker's max_message_size (the
// broker closes the channel with 406 PRECONDITION_FAILED).
var ErrMessageTooLarge = errors.New("amqp: message larger than the broker's max_message_size")

// ErrInvalidTopic is wrapped by the permanent error [Publisher.Publish]
// reports for a topic that cannot name an AMQP queue or exchange: empty,
// longer than 255 bytes, or starting with the reserved "amq." prefix.
var ErrInvalidTopic = errors.New("amqp: invalid topic")

// UnroutableError is the error [Publisher.Publish] reports for a message the
// broker returned (basic.return) because no queue was bound to take it. When
// the same Publish call declared the topology, it is wrapped in a
// [runtime.PermanentError]: a misconfiguration, such as [ModePubSub] with no
// group's queue declared and [Config.Groups] naming none. When the topology
// was declared by an earlier call on the connection, a binding or queue was
// deleted (or expired, x-expires) behind the publisher's back: the error is
// then retryable, and the retry declares the topology again.
type UnroutableError struct {
	// Exchange is the exchange the message was published to ("" is the
	// default exchange).
	Exchange string
	// RoutingKey is the message's routing key.
	RoutingKey string
	// MessageID is the AMQP message-id property (the Watermill UUID).
	MessageID string
	// ReplyCode and ReplyText are the broker's reason (312 NO_ROUTE).
	ReplyCode uint16
	ReplyText string
}

// Error describes the route that reached no queue.
func (e *UnroutableError) Error() string {
	ex := fmt.Sprintf("exchange %q", e.Exchange)
	if e.Exchange == "" {
		ex = "the default exchange"
	}
	return fmt.Sprintf("amqp: message %s returned unroutable (%d %s) by %s with routing key %q: no queue is bound to take it; declare the subscribers' queues first (SubscribeInitialize or Config.Groups)",
		e.MessageID, e.ReplyCode, e.ReplyText, ex, e.RoutingKey)
}
