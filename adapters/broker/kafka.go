package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/kafka"
)

// openKafka opens kafka://host:port[,host:port...]. Parameters:
//
//	partitions=N  partitions of topics a subscriber creates (default 1)
func openKafka(_ context.Context, u *url.URL, logger *slog.Logger) (*Broker, error) {
	q, err := query(u, "partitions")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: kafka:// needs at least one host:port", ErrInvalidURL)
	}
	brokers := strings.Split(u.Host, ",")
	partitions := 0
	if p := q.Get("partitions"); p != "" {
		if partitions, err = strconv.Atoi(p); err != nil || partitions < 1 {
			return nil, fmt.Errorf("%w: partitions=%q is not a positive integer", ErrInvalidURL, p)
		}
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &Broker{
		guarantees: Guarantees{OrderPerAggregate: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		publisher:  pub,
		subscriber: func(group string) (message.Subscriber, error) {
			return kafka.NewSubscriber(kafka.SubscriberConfig{
				Brokers:         brokers,
				ConsumerGroup:   group,
				TopicPartitions: partitions,
				Logger:          logger,
			})
		},
	}, nil
}
