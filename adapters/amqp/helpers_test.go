package amqp_test

import (
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/adapters/amqp/amqptest"
)

var verbose = flag.Bool("amqp.log", false, "log the adapters' debug output to stderr")

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 20 * time.Second

// queueExpiry makes every queue the tests declare expire once unused for
// this long (x-expires), so a killed test run does not fill the server.
const queueExpiry = 5 * time.Minute

func testLogger() *slog.Logger {
	if *verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// brokerURL returns the test broker's URL (see amqptest.URL).
func brokerURL(t testing.TB) string { return amqptest.URL(t) }

// testConfig returns a Config for the test broker whose queues expire.
func testConfig(t testing.TB) amqp.Config {
	return amqp.Config{
		URL:            brokerURL(t),
		QueueArguments: amqp091.Table{"x-expires": int64(queueExpiry / time.Millisecond)},
	}
}

// newTopic returns a topic name unique to t and this run; t's cleanup
// deletes the queues and the exchange named after it (and after it with a
// group suffix, for the groups given).
func newTopic(t testing.TB, url string, groups ...string) string {
	t.Helper()
	topic := "outbox-test-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + watermill.NewShortUUID()
	if len(topic) > 200 {
		topic = topic[len(topic)-200:]
	}
	t.Cleanup(func() { deleteTopology(t, url, topic, groups...) })
	return topic
}

// deleteTopology deletes topic's queue and exchange and its groups' queues.
func deleteTopology(t testing.TB, url, topic string, groups ...string) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Logf("cleanup: dial: %v", err)
		return
	}
	defer conn.Close()
	queues := []string{topic}
	for _, g := range groups {
		queues = append(queues, topic+"_"+g)
	}
	for _, q := range queues {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.Close()
	}
	if ch, err := conn.Channel(); err == nil {
		_ = ch.ExchangeDelete(topic, false, false)
		_ = ch.Close()
	}
}

// newPublisher returns a publisher closed by t.Cleanup.
func newPublisher(t testing.TB, cfg amqp.Config) *amqp.Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	pub, err := amqp.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() {
		if err := pub.Close(); err != nil {
			t.Errorf("Publisher.Close: %v", err)
		}
	})
	return pub
}

// newSubscriber returns a subscriber closed by t.Cleanup.
func newSubscriber(t testing.TB, cfg amqp.Config) *amqp.Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := amqp.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() {
		if err := sub.Close(); err != nil {
			t.Errorf("Subscriber.Close: %v", err)
		}
	})
	return sub
}

// queueDepth returns the number of ready messages in queue.
func queueDepth(t testing.TB, url, queue string) int {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %q: %v", queue, err)
	}
	return q.Messages
}
