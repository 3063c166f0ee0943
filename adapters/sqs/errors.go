package sqs

import "errors"

// ErrPublisherClosed is returned by [Publisher.Publish] and
// [SNSPublisher.Publish] after Close has been called.
var ErrPublisherClosed = errors.New("sqs: publisher closed")

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] and
// [Subscriber.SubscribeInitialize] after [Subscriber.Close] has been called.
var ErrSubscriberClosed = errors.New("sqs: subscriber closed")

// ErrInvalidConfig is wrapped by the errors of the Validate methods and the
// constructors when a setting is missing or out of range.
var ErrInvalidConfig = errors.New("sqs: invalid config")

// ErrInvalidTopic is wrapped by the error for a Watermill topic (or consumer
// group) that cannot be mapped to an SQS queue or SNS topic name: empty, or
// too long once sanitised. Publish wraps it in a [runtime.PermanentError].
var ErrInvalidTopic = errors.New("sqs: invalid topic")

// ErrMessageTooLarge is wrapped by the error for a message whose encoded
// size (body plus message attributes) exceeds the configured maximum. Publish
// reports it per message, as a [runtime.PermanentError].
var ErrMessageTooLarge = errors.New("sqs: message too large")

// errEarlierFailed is the error of a message not sent because an earlier
// message of its message group failed in the same Publish call: sending it
// would put it on the queue ahead of the one that failed.
var errEarlierFailed = errors.New("sqs: not sent: an earlier message of its message group failed")

// ErrNoSubscribers is wrapped by [SNSPublisher.Publish]'s error when the SNS
// topic has no confirmed subscription, so that SNS would accept the messages
// and deliver them to no one. It is retryable: the relay publishes the
// messages once a group's queue is subscribed. See
// [SNSPublisherConfig.AllowNoSubscribers].
var ErrNoSubscribers = errors.New("sns: topic has no subscriptions")
