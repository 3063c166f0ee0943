package servicebus

import "errors"

// ErrInvalidConfig is wrapped by the errors of the Validate methods and the
// constructors when a setting is missing or out of range.
var ErrInvalidConfig = errors.New("servicebus: invalid config")

// ErrPublisherClosed is returned by [Publisher.Publish] after Close.
var ErrPublisherClosed = errors.New("servicebus: publisher closed")

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] after Close.
var ErrSubscriberClosed = errors.New("servicebus: subscriber closed")

// ErrMessageTooLarge is wrapped by the error of a message larger than the
// entity takes (a batch of it alone is refused). Publish reports it for
// that message, as a runtime.PermanentError.
var ErrMessageTooLarge = errors.New("servicebus: message too large")

// ErrInvalidSessionID is wrapped by the error of a message whose aggregate
// id cannot be a session id (more than 128 characters). Publish reports it
// for that message, as a runtime.PermanentError.
var ErrInvalidSessionID = errors.New("servicebus: aggregate id is not a valid session id")
