package sqs

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
)

// SubscriberConfig configures a [Subscriber]. Every field's zero value means
// the documented default.
type SubscriberConfig struct {
	// AWS says how to reach SQS (and SNS, with ConsumerGroup).
	//
	// Default: the AWS SDK's default configuration chain.
	AWS ClientConfig

	// ConsumerGroup, when set, makes the subscriber read the SNS fan-out of
	// a topic published by [SNSPublisher]: the group's own SQS FIFO queue
	// [GroupQueueName](topic, group), subscribed with raw message delivery
	// to the SNS FIFO topic [TopicName](topic). Every group gets every
	// message; the subscribers of one group share them.
	//
	// Default: "": read the queue [PublisherConfig.QueueName] names, the one
	// [Publisher] sends to. SQS has no consumer groups: all subscribers of a
	// queue share its messages.
	ConsumerGroup string

	// QueueName maps a topic to the queue to read when ConsumerGroup is
	// empty.
	//
	// Default: [QueueName].
	QueueName func(topic string) (string, error)

	// CreateQueue makes the subscriber create what it reads from when it is
	// missing, on Subscribe and SubscribeInitialize: the FIFO queue; and,
	// with ConsumerGroup, also the SNS FIFO topic, the queue policy that lets
	// the topic send to the queue, and the raw-delivery subscription (see
	// [EnsureGroupQueue]).
	//
	// Default: false: Subscribe fails when the queue does not exist.
	CreateQueue bool

	// QueueAttributes are further attributes for queues the subscriber
	// creates (see [PublisherConfig.QueueAttributes]).
	QueueAttributes map[string]string

	// TopicAttributes are further attributes for SNS topics the subscriber
	// creates (see [SNSPublisherConfig.TopicAttributes]).
	TopicAttributes map[string]string

	// WaitTime is the long-polling wait of each ReceiveMessage call (whole
	// seconds, at most 20s). Close and the end of a Subscribe context wait
	// for a call in progress rather than interrupt it (SQS would hide the
	// messages it hands out to an abandoned call for their visibility
	// timeout), so they take up to WaitTime.
	//
	// Default: 20s.
	WaitTime time.Duration

	// MaxMessages is the MaxNumberOfMessages of each ReceiveMessage call (1
	// to 10). The messages of one call are handed out one at a time; those
	// not yet handed out keep their visibility timeout running, so with
	// slow handlers keep this small.
	//
	// Default: 10.
	MaxMessages int

	// VisibilityTimeout is how long a received message stays hidden from
	// other consumers (and, on a FIFO queue, blocks its message group) until
	// it is acked or nacked. A handler that takes longer lets the message be
	// delivered again. It is also how long messages stay hidden when the
	// response of a ReceiveMessage call is lost on the way (the SDK then
	// retries the call, and SQS has already handed them out).
	//
	// Default: 0: the queue's VisibilityTimeout attribute (30s unless set).
	VisibilityTimeout time.Duration

	// NackDelay is the visibility timeout a nacked message is given: how
	// long until it (and, on a FIFO queue, the rest of its group) is
	// delivered again.
	//
	// Default: 0: at once.
	NackDelay time.Duration

	// RetryDelay is how long the subscriber waits after a failed
	// ReceiveMessage before trying again.
	//
	// Default: 1s.
	RetryDelay time.Duration

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewSubscriber] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.QueueName == nil {
		c.QueueName = QueueName
	}
	if c.WaitTime == 0 {
		c.WaitTime = 20 * time.Second
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = 10
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
}

// Validate reports whether c is usable. The error wraps [ErrInvalidConfig].
func (c SubscriberConfig) Validate() error {
	switch {
	case c.WaitTime < 0 || c.WaitTime > 20*time.Second:
		return fmt.Errorf("%w: WaitTime %s not within 0 to 20s", ErrInvalidConfig, c.WaitTime)
	case c.MaxMessages < 0 || c.MaxMessages > 10:
		return fmt.Errorf("%w: MaxMessages %d not within 1 to 10", ErrInvalidConfig, c.MaxMessages)
	case c.VisibilityTimeout < 0 || c.VisibilityTimeout > 12*time.Hour:
		return fmt.Errorf("%w: VisibilityTimeout %s not within 0 to 12h", ErrInvalidConfig, c.VisibilityTimeout)
	case c.NackDelay < 0 || c.NackDelay > 12*time.Hour:
		return fmt.Errorf("%w: NackDelay %s not within 0 to 12h", ErrInvalidConfig, c.NackDelay)
	case c.RetryDelay < 0:
		return fmt.Errorf("%w: negative RetryDelay %s", ErrInvalidConfig, c.RetryDelay)
	}
	if _, ok := c.QueueAttributes[string(types.QueueAttributeNameFifoQueue)]; ok {
		return fmt.Errorf("%w: QueueAttributes sets FifoQueue; queues are always FIFO", ErrInvalidConfig)
	}
	return nil
}

// Subscriber is a Watermill [message.Subscriber] that long-polls an SQS
// queue. It is safe for concurrent use.
type Subscriber struct {
	cfg    SubscriberConfig
	client SQSAPI
	sns    SNSAPI // nil without ConsumerGroup
	logger watermill.LoggerAdapter
	queues *queueCache
	topics *topicCache

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber configured by cfg. It logs to
// cfg.Logger. It does not contact AWS; Subscribe does.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.QueueAttributes = maps.Clone(cfg.QueueAttributes)
	cfg.TopicAttributes = maps.Clone(cfg.TopicAttributes)
	client, err := cfg.AWS.sqsClient(context.Background())
	if err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, client: client, closing: make(chan struct{})}
	if cfg.ConsumerGroup != "" {
		if s.sns, err = cfg.AWS.snsClient(context.Background()); err != nil {
			return nil, err
		}
		s.topics = newTopicCache(s.sns, nil, cfg.TopicAttributes)
	}
	// Without CreateQueue, or with ConsumerGroup (whose queue is created
	// with its subscription), the cache only looks queues up.
	s.queues = newQueueCache(client, cfg.CreateQueue && cfg.ConsumerGroup == "", cfg.QueueAttributes)
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	s.logger = logger.With(watermill.LogFields{"component": "sqs_subscriber"})
	return s, nil
}

// SubscribeInitialize makes sure what Subscribe reads from exists, creating
// it when CreateQueue is set: with ConsumerGroup, messages published to the
// SNS topic before the group's queue is subscribed are not delivered to it,
// so call this (or Subscribe) before publishing.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.isClosed() {
		return ErrSubscriberClosed
	}
	_, err := s.queueURL(context.Background(), topic)
	return err
}

// queueURL returns the URL of the queue to read for topic.
func (s *Subscriber) queueURL(ctx context.Context, topic string) (string, error) {
	if s.cfg.ConsumerGroup == "" {
		name, err := s.cfg.QueueName(topic)
		if err != nil {
			return "", fmt.Errorf("sqs: subscribe to %q: %w", topic, err)
		}
		u, err := s.queues.url(ctx, name)
		if err != nil {
			return "", fmt.Errorf("sqs: subscribe to %q: %w", topic, err)
		}
		return u, nil
	}
	name, err := GroupQueueName(topic, s.cfg.ConsumerGroup)
	if err != nil {
		return "", fmt.Errorf("sqs: subscribe to %q: %w", topic, err)
	}
	if !s.cfg.CreateQueue {
		u, err := s.queues.url(ctx, name)
		if err != nil {
			return "", fmt.Errorf("sqs: subscribe to %q: %w", topic, err)
		}
		return u, nil
	}
	arn, err := s.topics.arn(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("sqs: subscribe to %q: %w", topic, err)
	}
	u, err := EnsureGroupQueue(ctx, s.client, s.sns, arn, name, s.cfg.QueueAttributes)
	if err != nil {
		return "", fmt.Errorf("sqs: subscribe to %q: %w", topic, err)
	}
	return u, nil
}

// Subscribe starts reading the queue of topic (see
// [SubscriberConfig.ConsumerGroup]) and returns the channel its messages
// arrive on. Messages are handed out one at a time in the order SQS returns
// them: the next only after the current one is acked or nacked. Ack deletes
// the message (DeleteMessage); Nack makes it visible again after NackDelay
// (ChangeMessageVisibility), together with the messages of the same
// ReceiveMessage call not yet handed out, so that a FIFO queue delivers the
// group again in order. The received message's UUID is its
// MessageDeduplicationId (the publisher's message UUID).
//
// The channel is closed when ctx is done or the Subscriber is closed.
// Messages received but not handed out by then are made visible again at
// once.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, ErrSubscriberClosed
	}
	url, err := s.queueURL(ctx, topic)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSubscriberClosed
	}
	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer cancel()
		go func() {
			select {
			case <-s.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		s.consume(ctx, topic, url, out)
	}()
	return out, nil
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// consume polls url until ctx is done.
func (s *Subscriber) consume(ctx context.Context, topic, url string, out chan<- *message.Message) {
	logFields := watermill.LogFields{"topic": topic, "queue_url": url}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MaxNumberOfMessages:         int32(s.cfg.MaxMessages),
		WaitTimeSeconds:             int32(s.cfg.WaitTime / time.Second),
		VisibilityTimeout:           int32(s.cfg.VisibilityTimeout / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	}
	for ctx.Err() == nil {
		// The receive is not interrupted when ctx ends: SQS hides the
		// messages it hands out for their visibility timeout (and blocks
		// their groups) even when the caller has gone, so the subscriber
		// waits for the answer, at most WaitTime, and releases them.
		recvCtx, cancelRecv := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WaitTime+30*time.Second)
		resp, err := s.client.ReceiveMessage(recvCtx, in)
		cancelRecv()
		if ctx.Err() != nil {
			if err == nil {
				s.release(url, resp.Messages, 0, logFields)
			}
			return
		}
		if err != nil {
			s.logger.Error("ReceiveMessage failed", err, logFields)
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.RetryDelay):
			}
			continue
		}
		for i, m := range resp.Messages {
			if !s.deliver(ctx, topic, url, m, out, logFields) {
				s.release(url, resp.Messages[i+1:], 0, logFields)
				break
			}
		}
	}
}

// deliver hands m out and waits for its ack; it reports whether the next
// message may follow (false after a nack or when ctx is done; m itself has
// been released then).
func (s *Subscriber) deliver(ctx context.Context, topic, url string, m types.Message, out chan<- *message.Message, logFields watermill.LogFields) bool {
	attrs := make(map[string]string, len(m.MessageAttributes))
	for k, v := range m.MessageAttributes {
		if v.StringValue != nil {
			attrs[k] = *v.StringValue
		}
	}
	payload, md, err := decode(aws.ToString(m.Body), attrs)
	if err != nil {
		// Deliver what arrived rather than block the group for ever.
		s.logger.Error("cannot decode message; delivering its body as it is", err, logFields)
		payload, md = []byte(aws.ToString(m.Body)), message.Metadata(attrs)
	}
	id := m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)]
	// A re-drive's deduplication id is its UUID and when it was
	// dead-lettered (publishing.DedupID).
	id = publishing.UUIDOfDedupID(id)
	if id == "" {
		if id = md.Get("event_id"); id == "" {
			id = aws.ToString(m.MessageId)
		}
	}
	msg := message.NewMessage(id, payload)
	msg.Metadata = md
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(msgCtx)

	select {
	case out <- msg:
	case <-ctx.Done():
		s.release(url, []types.Message{m}, 0, logFields)
		return false
	}
	select {
	case <-msg.Acked():
		// The delete runs even when ctx ends now: the message was handled.
		delCtx, cancelDel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, err := s.client.DeleteMessage(delCtx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
		cancelDel()
		if err != nil {
			// At least once: the message comes back after its visibility
			// timeout.
			s.logger.Error("DeleteMessage failed; the message will be delivered again", err, logFields)
		}
		return true
	case <-msg.Nacked():
		s.release(url, []types.Message{m}, s.cfg.NackDelay, logFields)
		return false
	case <-ctx.Done():
		s.release(url, []types.Message{m}, 0, logFields)
		return false
	}
}

// release makes msgs visible again after delay.
func (s *Subscriber) release(url string, msgs []types.Message, delay time.Duration, logFields watermill.LogFields) {
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: int32(delay / time.Second),
		})
		cancel()
		if err != nil {
			s.logger.Info("ChangeMessageVisibility failed; the message reappears after its visibility timeout", watermill.LogFields{"error": err.Error()}.Add(logFields))
		}
	}
}

// Close stops every subscription and waits until their channels are
// closed: up to WaitTime, as a ReceiveMessage call in progress is waited
// for and the messages it returns are made visible again at once. It is
// safe to call more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
