package eventbridge

import "errors"

// ErrInvalidConfig is wrapped by the errors of [PublisherConfig.Validate]
// and [NewPublisher] when a setting is missing or out of range.
var ErrInvalidConfig = errors.New("eventbridge: invalid config")

// ErrPublisherClosed is returned by [Publisher.Publish] after Close.
var ErrPublisherClosed = errors.New("eventbridge: publisher closed")

// ErrMessageTooLarge is wrapped by the error of a message whose entry is
// larger than PutEvents takes (256 KiB, counted as EventBridge counts it:
// Source, DetailType, Detail, the time and the resources). Publish reports
// it for that message alone, as a runtime.PermanentError.
var ErrMessageTooLarge = errors.New("eventbridge: event entry too large")

// ErrNoSubscriber is the error of the broker's Subscriber: EventBridge
// delivers events through rules to targets (an SQS queue, a Lambda
// function, ...), not to subscribers; consume from the target.
var ErrNoSubscriber = errors.New("eventbridge: EventBridge has no subscribers: a rule delivers to a target (an SQS queue: consume it with sqs://)")
