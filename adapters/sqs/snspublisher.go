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
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
)

// SNSPublisherConfig configures an [SNSPublisher]. Every field's zero value
// means the documented default.
type SNSPublisherConfig struct {
	// AWS says how to reach SNS.
	//
	// Default: the AWS SDK's default configuration chain.
	AWS ClientConfig

	// TopicARN returns the ARN of the SNS FIFO topic of a Watermill topic,
	// for topics created elsewhere (then the publisher needs no
	// sns:CreateTopic permission).
	//
	// Default: nil: the ARN comes from CreateTopic (FifoTopic=true,
	// ContentBasedDeduplication=false, plus TopicAttributes) on the topic
	// named by [TopicName]. CreateTopic is idempotent, so this also creates
	// a missing topic; but SNS refuses it for an existing topic with other
	// attributes (ContentBasedDeduplication=true, say), so set TopicARN for
	// topics created elsewhere.
	TopicARN func(topic string) (string, error)

	// TopicAttributes are further attributes for topics the publisher or
	// subscriber creates ("KmsMasterKeyId", "ArchivePolicy", ...).
	//
	// Default: none.
	TopicAttributes map[string]string

	// GroupID returns the MessageGroupId of a message, as
	// [PublisherConfig.GroupID]. SNS passes it on to the subscribed SQS FIFO
	// queues.
	//
	// Default: [AggregateGroupID].
	GroupID func(topic string, msg *message.Message) (string, error)

	// MaxMessageBytes is the largest message (body and attributes) and the
	// largest PublishBatch request.
	//
	// Default: [DefaultMaxMessageBytes] (256 KiB, SNS's limit).
	MaxMessageBytes int

	// AllowNoSubscribers lets Publish succeed on a topic with no confirmed
	// subscription. SNS accepts such a message and delivers it to no one,
	// so by default the publisher asks SNS (GetTopicAttributes,
	// SubscriptionsConfirmed) before it publishes to a topic, and again at
	// most every [SubscriptionCheckInterval], and fails the call with a
	// retryable error wrapping [ErrNoSubscribers] while there is none: the
	// relay keeps the events until a consumer group's queue is subscribed
	// (see [SubscriberConfig.ConsumerGroup] and [EnsureGroupQueue]). A
	// subscription removed between two checks still loses what is
	// published in between; and a group subscribed later never receives
	// what was published before, whatever this setting.
	//
	// Default: false (needs the sns:GetTopicAttributes permission).
	AllowNoSubscribers bool

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewSNSPublisher] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

// SubscriptionCheckInterval is how long an [SNSPublisher] trusts that a
// topic has a subscription before it asks SNS again.
const SubscriptionCheckInterval = 30 * time.Second

func (c *SNSPublisherConfig) setDefaults() {
	if c.GroupID == nil {
		c.GroupID = AggregateGroupID
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

// Validate reports whether c is usable. The error wraps [ErrInvalidConfig].
func (c SNSPublisherConfig) Validate() error {
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("%w: negative MaxMessageBytes %d", ErrInvalidConfig, c.MaxMessageBytes)
	}
	if _, ok := c.TopicAttributes["FifoTopic"]; ok {
		return fmt.Errorf("%w: TopicAttributes sets FifoTopic; topics are always FIFO", ErrInvalidConfig)
	}
	return nil
}

// SNSPublisher is a Watermill [message.Publisher] that publishes to SNS FIFO
// topics with PublishBatch, for fan-out: every consumer group reads its own
// SQS FIFO queue subscribed to the topic (see [SubscriberConfig.ConsumerGroup]).
// It is safe for concurrent use.
type SNSPublisher struct {
	cfg    SNSPublisherConfig
	client SNSAPI
	logger watermill.LoggerAdapter
	topics *topicCache

	subMu      sync.Mutex
	subscribed map[string]time.Time // topic ARN → when a subscription was last seen

	gate publishing.Gate // Publish calls and Close
}

var _ message.Publisher = (*SNSPublisher)(nil)

// checkSubscribed fails with [ErrNoSubscribers] when the topic has no
// confirmed subscription (see [SNSPublisherConfig.AllowNoSubscribers]).
func (p *SNSPublisher) checkSubscribed(ctx context.Context, arn string) error {
	if p.cfg.AllowNoSubscribers {
		return nil
	}
	p.subMu.Lock()
	seen, ok := p.subscribed[arn]
	p.subMu.Unlock()
	if ok && time.Since(seen) < SubscriptionCheckInterval {
		return nil
	}
	out, err := p.client.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
	if err != nil {
		return fmt.Errorf("GetTopicAttributes %s: %w", arn, err)
	}
	if n := out.Attributes["SubscriptionsConfirmed"]; n == "" || n == "0" {
		return fmt.Errorf("%w: %s (SNS would accept the messages and deliver them to no one; subscribe a group's queue first)", ErrNoSubscribers, arn)
	}
	p.subMu.Lock()
	p.subscribed[arn] = time.Now()
	p.subMu.Unlock()
	return nil
}

// NewSNSPublisher returns an SNSPublisher configured by cfg. It logs to
// cfg.Logger. It does not contact SNS; the first Publish does.
func NewSNSPublisher(cfg SNSPublisherConfig) (*SNSPublisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.TopicAttributes = maps.Clone(cfg.TopicAttributes)
	client, err := cfg.AWS.snsClient(context.Background())
	if err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	return &SNSPublisher{
		cfg:    cfg,
		client: client,
		logger: logger.With(watermill.LogFields{"component": "sns_publisher"}),
		topics: newTopicCache(client, cfg.TopicARN, cfg.TopicAttributes),

		subscribed: make(map[string]time.Time),
	}, nil
}

// Publish publishes msgs to the SNS FIFO topic of topic and returns nil once
// SNS has accepted every message, in PublishBatch requests of at most 10
// entries and MaxMessageBytes bytes, one at a time, in order. Group ids,
// deduplication ids (the message UUID; SNS FIFO deduplicates for 5
// minutes), message format and error classification are those of
// [Publisher.Publish]. A topic whose name is invalid fails the whole call
// permanently; one whose ARN cannot be had fails it retryably.
func (p *SNSPublisher) Publish(topic string, msgs ...*message.Message) error {
	return p.gate.Publish(ErrPublisherClosed, transient, func() error { return p.publish(topic, msgs) })
}

// publish is [SNSPublisher.Publish] within the gate: no Close runs meanwhile.
func (p *SNSPublisher) publish(topic string, msgs []*message.Message) (err error) {
	if len(msgs) == 0 {
		return nil
	}
	if _, err := TopicName(topic); err != nil && p.cfg.TopicARN == nil {
		return permanentf("sns: publish to %q: %w", topic, err)
	}
	ctx, cancel := publishing.Context(msgs, 0, nil)
	defer cancel()
	arn, err := p.topics.arn(ctx, topic)
	if err != nil {
		return fmt.Errorf("sns: publish to %q: %w", topic, err)
	}
	if err := p.checkSubscribed(ctx, arn); err != nil {
		return fmt.Errorf("sns: publish to %q: %w", topic, err)
	}
	start := time.Now()
	err = publishBatches(ctx, "sns", topic, msgs, p.cfg.GroupID, p.cfg.MaxMessageBytes,
		func(ctx context.Context, batch []*entry) ([]entryResult, error) {
			return p.sendBatch(ctx, arn, batch)
		})
	if err != nil {
		return err
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic": topic, "topic_arn": arn, "messages": len(msgs), "duration": time.Since(start),
	})
	return nil
}

func (p *SNSPublisher) sendBatch(ctx context.Context, arn string, batch []*entry) ([]entryResult, error) {
	in := &sns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: make([]snstypes.PublishBatchRequestEntry, len(batch))}
	for i, e := range batch {
		attrs := make(map[string]snstypes.MessageAttributeValue, len(e.enc.attrs))
		for k, v := range e.enc.attrs {
			attrs[k] = snstypes.MessageAttributeValue{DataType: aws.String(stringType), StringValue: aws.String(v)}
		}
		in.PublishBatchRequestEntries[i] = snstypes.PublishBatchRequestEntry{
			Id:                     aws.String(batchID(i)),
			Message:                aws.String(e.enc.body),
			MessageAttributes:      attrs,
			MessageGroupId:         aws.String(e.group),
			MessageDeduplicationId: aws.String(e.dedup),
		}
	}
	out, err := p.client.PublishBatch(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("PublishBatch to %s: %w", arn, err)
	}
	ok := make([]*string, len(out.Successful))
	for k, e := range out.Successful {
		ok[k] = e.Id
	}
	failed := make([]entryFailure, len(out.Failed))
	for k, f := range out.Failed {
		failed[k] = entryFailure{id: f.Id, code: f.Code, message: f.Message, senderFault: f.SenderFault}
	}
	return entryResults("PublishBatch to "+arn, len(batch), ok, failed), nil
}

// Close waits for in-flight Publish calls. It is safe to call more than once.
func (p *SNSPublisher) Close() error { return p.gate.Close(nil) }

// topicCache resolves Watermill topics to SNS topic ARNs.
type topicCache struct {
	client SNSAPI
	lookup func(topic string) (string, error)
	attrs  map[string]string

	mu   sync.Mutex
	arns map[string]string
}

func newTopicCache(client SNSAPI, lookup func(string) (string, error), attrs map[string]string) *topicCache {
	return &topicCache{client: client, lookup: lookup, attrs: attrs, arns: make(map[string]string)}
}

func (c *topicCache) arn(ctx context.Context, topic string) (string, error) {
	c.mu.Lock()
	a, ok := c.arns[topic]
	c.mu.Unlock()
	if ok {
		return a, nil
	}
	if c.lookup != nil {
		a, err := c.lookup(topic)
		if err != nil {
			return "", fmt.Errorf("TopicARN: %w", err)
		}
		return a, nil
	}
	name, err := TopicName(topic)
	if err != nil {
		return "", err
	}
	attrs := maps.Clone(c.attrs)
	if attrs == nil {
		attrs = make(map[string]string, 2)
	}
	attrs["FifoTopic"] = "true"
	if _, ok := attrs["ContentBasedDeduplication"]; !ok {
		attrs["ContentBasedDeduplication"] = "false"
	}
	out, err := c.client.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("CreateTopic %s: %w", name, err)
	}
	a = aws.ToString(out.TopicArn)
	c.mu.Lock()
	c.arns[topic] = a
	c.mu.Unlock()
	return a, nil
}
