package broker_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks/hookstest"
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// reachable skips t (or fails it, under OUTBOX_TEST_REQUIRE_INTEGRATION=1)
// when the server of rawURL does not accept a TCP connection.
func reachable(t *testing.T, what, rawURL, envVar string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		hookstest.Unavailable(t, what, u.Host, envVar, err)
		return
	}
	c.Close()
}

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against every broker, through the URL a user passes to the relay command.
// Each subtest is also the relay process of its own run: see
// adaptertest.Run.
func TestConformance(t *testing.T) {
	t.Run("amqp", func(t *testing.T) {
		uri := envOr("OUTBOX_TEST_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/")
		reachable(t, "RabbitMQ", uri, "OUTBOX_TEST_AMQP_URI")
		// The README's RabbitMQ setup: a durable queue per topic, which no
		// one has declared before the relay publishes.
		topic := "conformance." + strconv.FormatUint(rand.Uint64(), 16)
		t.Cleanup(func() { deleteQueue(t, uri, topic) })
		adaptertest.Run(t, adaptertest.Config{BrokerURL: uri, Topic: topic})
	})
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

// deleteQueue deletes a durable queue the suite left on the shared server.
func deleteQueue(t *testing.T, uri, queue string) {
	conn, err := amqp091.Dial(uri)
	if err != nil {
		t.Logf("delete queue %s: %v", queue, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("delete queue %s: %v", queue, err)
		return
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Logf("delete queue %s: %v", queue, err)
	}
}
