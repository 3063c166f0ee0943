package sqs

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers the package's URL schemes with package adapters/broker,
// so that importing the package is all broker.Open needs.
func init() {
	broker.Register("sqs", openSQS)
	broker.Register("sns", openSNS)
}

// openSQS opens sqs://[host:port] (SQS FIFO queues, one per topic). With a
// host, the endpoint is http://host:port (an emulator: LocalStack,
// adapters/sqs/sqstest) and the credentials are dummies unless the URL
// carries user:password; without one, it is AWS itself, with the region and
// credentials of the AWS SDK's default chain. Parameters:
//
//	region=NAME  AWS region (default: the default chain's; us-east-1 with a host)
//	create=1     create missing queues (default 0)
//	wait=DUR     subscribers' long-polling wait, whole seconds from 1s to 20s
//	             (SubscriberConfig.WaitTime, default 20s); a subscriber's
//	             Close waits for a poll in progress, so a short wait makes
//	             Close quick at the cost of more ReceiveMessage calls
//
// SQS has no consumer groups: every Subscriber(group) of one topic shares
// the topic's queue. Use sns:// for groups.
func openSQS(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	o, err := awsURL(u)
	if err != nil {
		return nil, err
	}
	pub, err := NewPublisher(PublisherConfig{AWS: o.client, CreateQueue: o.create, Logger: logger})
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Dedup: true, Durable: true, SharedAcrossProcesses: true},
		Publisher:  pub,
		Subscriber: func(string) (message.Subscriber, error) {
			return NewSubscriber(SubscriberConfig{AWS: o.client, CreateQueue: o.create, WaitTime: o.wait, Logger: logger})
		},
	}), nil
}

// openSNS opens sns://[host:port] (SNS FIFO topics fanned out to one SQS
// FIFO queue per consumer group), with the host, credentials and parameters
// of sqs://. The publisher creates missing topics (CreateTopic is
// idempotent); create=1 makes subscribers create their group's queue and
// subscription, which must exist before messages are published for the
// group to get them. While a topic has no subscription at all, the
// publisher fails retryably (ErrNoSubscribers) instead of letting SNS
// drop the messages.
func openSNS(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	o, err := awsURL(u)
	if err != nil {
		return nil, err
	}
	pub, err := NewSNSPublisher(SNSPublisherConfig{AWS: o.client, Logger: logger})
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Dedup: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			return NewSubscriber(SubscriberConfig{AWS: o.client, ConsumerGroup: group, CreateQueue: o.create, WaitTime: o.wait, Logger: logger})
		},
	}), nil
}

// urlOptions are what an sqs:// or sns:// URL sets.
type urlOptions struct {
	client ClientConfig
	create bool          // create=1
	wait   time.Duration // wait=DUR; 0 for the default
}

// awsURL reads the endpoint, credentials and parameters of sqs:// and
// sns:// URLs.
func awsURL(u *url.URL) (urlOptions, error) {
	q, err := broker.Query(u, "region", "create", "wait")
	if err != nil {
		return urlOptions{}, err
	}
	var o urlOptions
	switch c := q.Get("create"); c {
	case "", "0", "false":
	case "1", "true":
		o.create = true
	default:
		return urlOptions{}, fmt.Errorf("%w: create=%q (want 0 or 1)", broker.ErrInvalidURL, c)
	}
	if w := q.Get("wait"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil || d < time.Second || d > 20*time.Second || d%time.Second != 0 {
			return urlOptions{}, fmt.Errorf("%w: wait=%q (want whole seconds from 1s to 20s, such as 1s)", broker.ErrInvalidURL, w)
		}
		o.wait = d
	}
	if u.Path != "" && u.Path != "/" {
		return urlOptions{}, fmt.Errorf("%w: %s:// takes no path (got %q)", broker.ErrInvalidURL, u.Scheme, u.Path)
	}
	o.client = ClientConfig{Region: q.Get("region")}
	if u.Host != "" {
		o.client.Endpoint = "http://" + u.Host
		key, secret := "test", "test"
		if u.User != nil {
			key = u.User.Username()
			secret, _ = u.User.Password()
		}
		region := o.client.Region
		if region == "" {
			region = "us-east-1"
		}
		o.client.AWSConfig = &aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")}
	} else if u.User != nil {
		return urlOptions{}, fmt.Errorf("%w: %s:// without a host uses the default AWS credential chain; credentials in the URL need a host", broker.ErrInvalidURL, u.Scheme)
	}
	return o, nil
}
