package kafka

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers the package's URL schemes with package adapters/broker,
// so that importing the package is all broker.Open needs.
func init() {
	broker.Register("kafka", openKafka)
}

// openKafka opens kafka://host:port[,host:port...]. Parameters:
//
//	partitions=N  partitions of topics a subscriber creates (default 1)
func openKafka(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	q, err := broker.Query(u, "partitions")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: kafka:// needs at least one host:port", broker.ErrInvalidURL)
	}
	brokers := strings.Split(u.Host, ",")
	partitions := 0
	if p := q.Get("partitions"); p != "" {
		if partitions, err = strconv.Atoi(p); err != nil || partitions < 1 {
			return nil, fmt.Errorf("%w: partitions=%q is not a positive integer", broker.ErrInvalidURL, p)
		}
	}
	pub, err := NewPublisher(PublisherConfig{Brokers: brokers, Logger: logger})
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			return NewSubscriber(SubscriberConfig{
				Brokers:         brokers,
				ConsumerGroup:   group,
				TopicPartitions: partitions,
				Logger:          logger,
			})
		},
		Lag: func(ctx context.Context, group string, topics []string) ([]broker.PartitionLag, error) {
			sub, err := NewSubscriber(SubscriberConfig{Brokers: brokers, ConsumerGroup: group, Logger: logger})
			if err != nil {
				return nil, err
			}
			defer sub.Close()
			lag, err := sub.Lag(ctx, topics...)
			out := make([]broker.PartitionLag, len(lag))
			for i, l := range lag {
				out[i] = broker.PartitionLag{Topic: l.Topic, Partition: l.Partition, Committed: l.Committed, End: l.End, Lag: l.Lag}
			}
			return out, err
		},
	}), nil
}
