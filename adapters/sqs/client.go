package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gooutbox/outbox/runtime"
)

// SQSAPI is the part of *sqs.Client this package uses. [ClientConfig.SQS]
// takes any implementation, for wrapping or faking the client.
type SQSAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, opts ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SetQueueAttributes(ctx context.Context, in *sqs.SetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.SetQueueAttributesOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// SNSAPI is the part of *sns.Client this package uses. [ClientConfig.SNS]
// takes any implementation.
type SNSAPI interface {
	CreateTopic(ctx context.Context, in *sns.CreateTopicInput, opts ...func(*sns.Options)) (*sns.CreateTopicOutput, error)
	Subscribe(ctx context.Context, in *sns.SubscribeInput, opts ...func(*sns.Options)) (*sns.SubscribeOutput, error)
	PublishBatch(ctx context.Context, in *sns.PublishBatchInput, opts ...func(*sns.Options)) (*sns.PublishBatchOutput, error)
	GetTopicAttributes(ctx context.Context, in *sns.GetTopicAttributesInput, opts ...func(*sns.Options)) (*sns.GetTopicAttributesOutput, error)
}

var (
	_ SQSAPI = (*sqs.Client)(nil)
	_ SNSAPI = (*sns.Client)(nil)
)

// ClientConfig says how to reach SQS and SNS. Its zero value uses the AWS
// SDK's default configuration chain (environment, shared config and
// credentials files, SSO, container and instance roles), as the AWS CLI does.
type ClientConfig struct {
	// Region is the AWS region, for example "eu-west-1".
	//
	// Default: the region of the default chain (AWS_REGION, the shared
	// config file's profile); "us-east-1" when Endpoint is set and the chain
	// names none, since emulators accept any region.
	Region string

	// Endpoint overrides the service endpoint, for an emulator such as
	// LocalStack or package sqstest: "http://127.0.0.1:4566". The same
	// endpoint serves SQS and SNS.
	//
	// Default: "" (the AWS endpoint of Region).
	Endpoint string

	// AWSConfig, when set, is used instead of loading the default chain:
	// credentials, retryer, HTTP client, ... Region and Endpoint above still
	// override its region and endpoint when they are set.
	//
	// Default: nil (load the default chain).
	AWSConfig *aws.Config

	// SQSOptions and SNSOptions are applied to the clients this package
	// builds, after Region and Endpoint: add API middleware, change the
	// retryer, ...
	SQSOptions []func(*sqs.Options)
	SNSOptions []func(*sns.Options)

	// SQS and SNS, when set, are used as they are and nothing above applies
	// to them: the escape hatch for a client built elsewhere, or a fake.
	SQS SQSAPI
	SNS SNSAPI
}

// awsConfig returns the aws.Config the clients are built from.
func (c ClientConfig) awsConfig(ctx context.Context) (aws.Config, error) {
	var cfg aws.Config
	if c.AWSConfig != nil {
		cfg = c.AWSConfig.Copy()
	} else {
		var err error
		if cfg, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
			return aws.Config{}, fmt.Errorf("sqs: load AWS config: %w", err)
		}
	}
	if c.Region != "" {
		cfg.Region = c.Region
	}
	if cfg.Region == "" && c.Endpoint != "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Region == "" {
		return aws.Config{}, fmt.Errorf("%w: no Region, and the default AWS config chain names none (set AWS_REGION)", ErrInvalidConfig)
	}
	return cfg, nil
}

// sqsClient returns c.SQS or builds a client.
func (c ClientConfig) sqsClient(ctx context.Context) (SQSAPI, error) {
	if c.SQS != nil {
		return c.SQS, nil
	}
	cfg, err := c.awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		for _, f := range c.SQSOptions {
			f(o)
		}
	}), nil
}

// snsClient returns c.SNS or builds a client.
func (c ClientConfig) snsClient(ctx context.Context) (SNSAPI, error) {
	if c.SNS != nil {
		return c.SNS, nil
	}
	cfg, err := c.awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return sns.NewFromConfig(cfg, func(o *sns.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		for _, f := range c.SNSOptions {
			f(o)
		}
	}), nil
}

const (
	fifoSuffix = ".fifo"
	// maxQueueName is SQS's limit on a queue name, ".fifo" included.
	maxQueueName = 80
	// maxTopicName is SNS's limit on a topic name, ".fifo" included.
	maxTopicName = 256
	// maxIDLen is SQS's and SNS's limit on MessageGroupId and
	// MessageDeduplicationId.
	maxIDLen = 128
)

// sanitize replaces every character that SQS and SNS names do not allow
// (anything but ASCII letters, digits, '-' and '_') with '_'.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < 128 && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// fifoName maps a Watermill topic to a FIFO resource name of at most max
// characters: a trailing ".fifo" is dropped, the rest sanitised, ".fifo"
// appended.
func fifoName(topic string, max int) (string, error) {
	base := strings.TrimSuffix(topic, fifoSuffix)
	if base == "" {
		return "", fmt.Errorf("%w: empty topic %q", ErrInvalidTopic, topic)
	}
	name := sanitize(base) + fifoSuffix
	if len(name) > max {
		return "", fmt.Errorf("%w: %q maps to %q, longer than the %d characters allowed", ErrInvalidTopic, topic, name, max)
	}
	return name, nil
}

// QueueName maps a Watermill topic to the SQS FIFO queue name that
// [Publisher] sends to and [Subscriber] reads: a trailing ".fifo" is
// dropped, every character other than ASCII letters, digits, '-' and '_' is
// replaced by '_', and ".fifo" is appended. "orders.created" becomes
// "orders_created.fifo". The result must be at most 80 characters; the
// error wraps [ErrInvalidTopic] otherwise, and for an empty topic.
//
// Topics that differ only in replaced characters ("a.b" and "a/b") map to
// the same queue.
func QueueName(topic string) (string, error) { return fifoName(topic, maxQueueName) }

// TopicName maps a Watermill topic to the SNS FIFO topic name that
// [SNSPublisher] publishes to, by the rules of [QueueName] with SNS's limit
// of 256 characters.
func TopicName(topic string) (string, error) { return fifoName(topic, maxTopicName) }

// GroupQueueName returns the name of the SQS FIFO queue that consumer group
// group reads a fanned-out SNS topic from: "<topic>-<group>.fifo",
// sanitised as by [QueueName]. When that is longer than SQS's 80
// characters, its first 62 characters are kept, followed by "-", the first
// 12 hex digits of the SHA-256 of topic and group, and ".fifo", so that
// distinct pairs keep distinct queues. The error wraps [ErrInvalidTopic]
// for an empty topic or group.
func GroupQueueName(topic, group string) (string, error) {
	if group == "" {
		return "", fmt.Errorf("%w: empty consumer group", ErrInvalidTopic)
	}
	base := strings.TrimSuffix(topic, fifoSuffix)
	if base == "" {
		return "", fmt.Errorf("%w: empty topic %q", ErrInvalidTopic, topic)
	}
	name := sanitize(base+"-"+group) + fifoSuffix
	if len(name) <= maxQueueName {
		return name, nil
	}
	sum := sha256.Sum256([]byte(topic + "\x00" + group))
	keep := maxQueueName - len(fifoSuffix) - 1 - 12
	return name[:keep] + "-" + hex.EncodeToString(sum[:])[:12] + fifoSuffix, nil
}

// validID reports whether s is a valid MessageGroupId or
// MessageDeduplicationId: 1 to 128 printable ASCII characters, no space.
func validID(s string) bool {
	if s == "" || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
}

// fifoID returns s when it is a valid message group or deduplication id, and
// otherwise "sha256-" and the hex SHA-256 of s (71 characters), which is
// valid and stable.
func fifoID(s string) string {
	if validID(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// AggregateGroupID is the default [PublisherConfig.GroupID]: the message's
// aggregate_id metadata ([runtime.MetadataAggregateID], or a CloudEvent's
// partitionkey: [runtime.AggregateOf]), so that each
// aggregate's events keep their order and different aggregates are
// delivered in parallel. A message without one gets the topic as its group:
// such messages keep one total order on the topic, and are delivered one at
// a time. An id that SQS does not accept as a MessageGroupId (more than 128
// characters, or characters outside printable ASCII) is replaced by
// "sha256-" and its hex SHA-256, which keeps one group per aggregate.
func AggregateGroupID(topic string, msg *message.Message) (string, error) {
	if _, id := runtime.AggregateOf(msg.Metadata); id != "" {
		return fifoID(id), nil
	}
	return fifoID(topic), nil
}
