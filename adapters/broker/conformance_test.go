package broker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against every broker, through the URL a user passes to the relay command.
// Each subtest is also the relay process of its own run: see
// adaptertest.Run.
func TestConformance(t *testing.T) {
	t.Run("kafka", func(t *testing.T) {
		brokers := kafkatest.NewCluster(t)
		adaptertest.Run(t, adaptertest.Config{
			BrokerURL: "kafka://" + strings.Join(brokers, ","),
			// Kafka topics are an operator's to create; 5 partitions, so
			// that a publisher that keyed records wrongly would reorder.
			Provision: func(ctx context.Context, topic string) error {
				sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "provision", TopicPartitions: 5}, nil)
				if err != nil {
					return err
				}
				defer sub.Close()
				return sub.SubscribeInitialize(topic)
			},
		})
	})
}
