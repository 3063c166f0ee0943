package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
)

// PublisherConfig configures a [Publisher]. Every field's zero value means
// the documented default.
type PublisherConfig struct {
	// AWS says how to reach SQS.
	//
	// Default: the AWS SDK's default configuration chain.
	AWS ClientConfig

	// QueueName maps a Watermill topic to a queue name. A name must end in
	// ".fifo": the publisher sets MessageGroupId and MessageDeduplicationId,
	// which only FIFO queues take. An error fails the Publish call,
	// permanently.
	//
	// Default: [QueueName] ("<topic>.fifo", sanitised).
	QueueName func(topic string) (string, error)

	// GroupID returns the MessageGroupId of a message. Messages of one group
	// are delivered in the order they were sent, one at a time; different
	// groups are delivered in parallel. An error (or an id SQS does not
	// accept) fails that message permanently.
	//
	// Default: [AggregateGroupID] (the aggregate_id metadata, else the topic).
	GroupID func(topic string, msg *message.Message) (string, error)

	// CreateQueue makes the publisher create a missing queue (CreateQueue
	// with FifoQueue=true, ContentBasedDeduplication=false and
	// QueueAttributes) instead of failing. It needs the sqs:CreateQueue
	// permission.
	//
	// Default: false: publishing to a missing queue fails with a retryable
	// error (QueueDoesNotExist), so a queue deployed late is used once it
	// exists.
	CreateQueue bool

	// QueueAttributes are further attributes for queues the publisher or
	// subscriber creates: "VisibilityTimeout", "MessageRetentionPeriod",
	// "RedrivePolicy", "KmsMasterKeyId", ... FifoQueue is always "true".
	//
	// Default: none (SQS's defaults: 30s visibility, 4 days retention).
	QueueAttributes map[string]string

	// MaxMessageBytes is the largest message, counted as SQS does (body
	// plus attribute names, types and values), and the largest batch
	// request. A larger message fails permanently without being sent. Raise
	// it only for queues whose MaximumMessageSize allows more.
	//
	// Default: [DefaultMaxMessageBytes] (256 KiB).
	MaxMessageBytes int

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewPublisher] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *PublisherConfig) setDefaults() {
	if c.QueueName == nil {
		c.QueueName = QueueName
	}
	if c.GroupID == nil {
		c.GroupID = AggregateGroupID
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

// Validate reports whether c is usable. The error wraps [ErrInvalidConfig].
func (c PublisherConfig) Validate() error {
	if c.MaxMessageBytes < 0 {
		return fmt.Errorf("%w: negative MaxMessageBytes %d", ErrInvalidConfig, c.MaxMessageBytes)
	}
	if _, ok := c.QueueAttributes[string(types.QueueAttributeNameFifoQueue)]; ok {
		return fmt.Errorf("%w: QueueAttributes sets FifoQueue; queues are always FIFO", ErrInvalidConfig)
	}
	return nil
}

// Publisher is a Watermill [message.Publisher] that sends to SQS FIFO
// queues with SendMessageBatch. It is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	client SQSAPI
	logger watermill.LoggerAdapter
	queues *queueCache

	// mu is held for reading by every Publish in flight and for writing by
	// Close, so Close waits for in-flight publishes.
	gate publishing.Gate // Publish calls and Close
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher configured by cfg. It logs to cfg.Logger.
// It loads the AWS configuration (which reads local files and the
// environment only) but does not contact SQS; the first Publish does. The
// error wraps [ErrInvalidConfig] when cfg is invalid.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.QueueAttributes = maps.Clone(cfg.QueueAttributes)
	client, err := cfg.AWS.sqsClient(context.Background())
	if err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	return &Publisher{
		cfg:    cfg,
		client: client,
		logger: logger.With(watermill.LogFields{"component": "sqs_publisher"}),
		queues: newQueueCache(client, cfg.CreateQueue, cfg.QueueAttributes),
	}, nil
}

// Publish sends msgs to the queue of topic and returns nil once SQS has
// stored every message. Messages are sent in order, in SendMessageBatch
// requests of at most 10 entries, MaxMessageBytes bytes and one message per
// message group, one request at a time, each message with its group id ([PublisherConfig.GroupID]) and the
// message UUID as MessageDeduplicationId. SQS drops a message whose
// deduplication id it has seen on the queue in the last 5 minutes, and
// still reports it as sent.
//
// When some messages fail, the error wraps a [runtime.PublishErrors] with one
// element per message, nil for those SQS took. A message larger than
// MaxMessageBytes, an invalid group id and an entry SQS refused as the
// sender's fault (SenderFault=true) are [*runtime.PermanentError]s; other
// failures are retryable. Once a message fails, the later messages of its
// group in the same call are not sent (they fail, retryably), so that a
// retry cannot put the failed message behind them.
//
// A topic that maps to no valid queue name fails the whole call with a
// [*runtime.PermanentError] wrapping [ErrInvalidTopic]; a missing queue
// (when CreateQueue is off) fails it with a retryable error. The requests run
// under the messages' contexts (msg.Context()): Publish stops when any of
// them is done. After Close, Publish returns [ErrPublisherClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.gate.Publish(ErrPublisherClosed, transient, func() error { return p.publish(topic, msgs) })
}

// publish is [Publisher.Publish] within the gate: no Close runs meanwhile.
func (p *Publisher) publish(topic string, msgs []*message.Message) (err error) {
	if len(msgs) == 0 {
		return nil
	}
	name, err := p.cfg.QueueName(topic)
	if err != nil {
		return permanentf("sqs: publish to %q: %w", topic, err)
	}
	ctx, cancel := publishing.Context(msgs, 0, nil)
	defer cancel()
	url, err := p.queues.url(ctx, name)
	if err != nil {
		return fmt.Errorf("sqs: publish to %q: %w", topic, err)
	}
	start := time.Now()
	err = publishBatches(ctx, "sqs", topic, msgs, p.cfg.GroupID, p.cfg.MaxMessageBytes,
		func(ctx context.Context, batch []*entry) ([]entryResult, error) {
			return p.sendBatch(ctx, name, url, batch)
		})
	if err != nil {
		return err
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic": topic, "queue": name, "messages": len(msgs), "duration": time.Since(start),
	})
	return nil
}

// sendBatch sends one SendMessageBatch request.
func (p *Publisher) sendBatch(ctx context.Context, name, url string, batch []*entry) ([]entryResult, error) {
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: make([]types.SendMessageBatchRequestEntry, len(batch))}
	for i, e := range batch {
		attrs := make(map[string]types.MessageAttributeValue, len(e.enc.attrs))
		for k, v := range e.enc.attrs {
			attrs[k] = types.MessageAttributeValue{DataType: aws.String(stringType), StringValue: aws.String(v)}
		}
		in.Entries[i] = types.SendMessageBatchRequestEntry{
			Id:                     aws.String(batchID(i)),
			MessageBody:            aws.String(e.enc.body),
			MessageAttributes:      attrs,
			MessageGroupId:         aws.String(e.group),
			MessageDeduplicationId: aws.String(e.dedup),
		}
	}
	out, err := p.client.SendMessageBatch(ctx, in)
	if err != nil {
		var missing *types.QueueDoesNotExist
		if errors.As(err, &missing) {
			p.queues.forget(name)
		}
		return nil, fmt.Errorf("SendMessageBatch to %s: %w", name, err)
	}
	ok := make([]*string, len(out.Successful))
	for k, e := range out.Successful {
		ok[k] = e.Id
	}
	failed := make([]entryFailure, len(out.Failed))
	for k, f := range out.Failed {
		failed[k] = entryFailure{id: f.Id, code: f.Code, message: f.Message, senderFault: f.SenderFault}
	}
	return entryResults("SendMessageBatch to "+name, len(batch), ok, failed), nil
}

// Close waits for in-flight Publish calls. It is safe to call more than
// once; Publish calls made after Close return [ErrPublisherClosed].
func (p *Publisher) Close() error { return p.gate.Close(nil) }

// entryIndex parses a batch result entry id.
func entryIndex(id *string, n int) (int, bool) {
	s := aws.ToString(id)
	for i := range n {
		if batchID(i) == s {
			return i, true
		}
	}
	return 0, false
}
