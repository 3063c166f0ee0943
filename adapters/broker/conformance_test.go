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

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	outboxnats "github.com/gooutbox/outbox/adapters/nats"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
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
	t.Run("nats", func(t *testing.T) {
		base := envOr("OUTBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")
		reachable(t, "NATS", base, "OUTBOX_TEST_NATS_URL")
		topic := "conformance." + strconv.FormatUint(rand.Uint64(), 16)
		prefix := "CONF" + strconv.FormatUint(rand.Uint64()%1e9, 10)
		t.Cleanup(func() { deleteStream(t, base, outboxnats.StreamName(prefix, topic)) })
		adaptertest.Run(t, adaptertest.Config{BrokerURL: base + "?stream_prefix=" + prefix, Topic: topic})
	})
	t.Run("redis", func(t *testing.T) {
		uri := envOr("OUTBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
		reachable(t, "Redis", uri, "OUTBOX_TEST_REDIS_URL")
		topic := "conformance." + strconv.FormatUint(rand.Uint64(), 16)
		t.Cleanup(func() { deleteKey(t, uri, topic) })
		adaptertest.Run(t, adaptertest.Config{BrokerURL: uri, Topic: topic})
	})
	t.Run("postgres", func(t *testing.T) {
		// watermill-sql's tables in a schema of their own, dropped after.
		adaptertest.Run(t, adaptertest.Config{BrokerURL: hookstest.PostgresDSN(t)})
	})
	t.Run("memory", func(t *testing.T) {
		// In one process: the relays run in the test process and are
		// stopped by cancelling them instead of SIGKILL.
		adaptertest.Run(t, adaptertest.Config{BrokerURL: "memory://"})
	})
	t.Run("sqs", func(t *testing.T) {
		adaptertest.Run(t, adaptertest.Config{BrokerURL: sqstest.BrokerURL(t, "sqs")})
	})
	t.Run("sns", func(t *testing.T) {
		// SNS delivers a message only to the queues subscribed when it is
		// published: a group's queue is set up (as an operator or the
		// group's first deployment would) before anything is written.
		uri := sqstest.BrokerURL(t, "sns")
		adaptertest.Run(t, adaptertest.Config{
			BrokerURL: uri,
			Provision: func(ctx context.Context, topic string) error {
				b, err := broker.Open(ctx, uri, broker.Config{})
				if err != nil {
					return err
				}
				defer b.Close()
				sub, err := b.Subscriber("conformance")
				if err != nil {
					return err
				}
				return sub.(message.SubscribeInitializer).SubscribeInitialize(topic)
			},
		})
	})
	t.Run("kafka", func(t *testing.T) {
		brokers := kafkatest.NewCluster(t)
		adaptertest.Run(t, adaptertest.Config{
			BrokerURL: "kafka://" + strings.Join(brokers, ","),
			// Kafka topics are an operator's to create; 5 partitions, so
			// that a publisher that keyed records wrongly would reorder.
			Provision: func(ctx context.Context, topic string) error {
				sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: brokers, ConsumerGroup: "provision", TopicPartitions: 5})
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

// deleteStream deletes a JetStream stream the suite left on the shared server.
func deleteStream(t *testing.T, uri, stream string) {
	nc, err := natsgo.Connect(uri)
	if err != nil {
		t.Logf("delete stream %s: %v", stream, err)
		return
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err == nil {
		err = js.DeleteStream(stream)
	}
	if err != nil {
		t.Logf("delete stream %s: %v", stream, err)
	}
}

// deleteKey deletes a Redis stream the suite left on the shared server.
func deleteKey(t *testing.T, uri, key string) {
	opt, err := goredis.ParseURL(uri)
	if err != nil {
		t.Logf("delete %s: %v", key, err)
		return
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Logf("delete %s: %v", key, err)
	}
}
