package kafka

import "errors"

// ErrPublisherClosed is returned by [Publisher.Publish] after
// [Publisher.Close] has been called.
var ErrPublisherClosed = errors.New("kafka: publisher closed")

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] and
// [Subscriber.SubscribeInitialize] after [Subscriber.Close] has been called.
var ErrSubscriberClosed = errors.New("kafka: subscriber closed")

// ErrInvalidConfig is wrapped by the errors of [PublisherConfig.Validate],
// [SubscriberConfig.Validate], [NewPublisher] and [NewSubscriber] when a
// setting is missing or out of range.
var ErrInvalidConfig = errors.New("kafka: invalid config")
