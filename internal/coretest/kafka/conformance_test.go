package kafka_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against Kafka (the in-process kfake cluster of package kafkatest) through
// the URL a user passes to the relay command.
func TestConformance(t *testing.T) {
	brokers := kafkatest.NewCluster(t)
	adaptertest.Run(t, adaptertest.Config{
		BrokerURL: "kafka://" + strings.Join(brokers, ","),
		// Kafka topics are an operator's to create; 5 partitions, so that
		// a publisher that keyed records wrongly would reorder.
		Provision: func(ctx context.Context, topic string) error {
			sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "provision", TopicPartitions: 5})
			if err != nil {
				return err
			}
			defer sub.Close()
			return sub.SubscribeInitialize(topic)
		},
	})
}
