package servicebus_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/servicebus"
	"github.com/gooutbox/outbox/runtime"
)

// EnvConnection and EnvTopic name a real namespace for
// TestRealNamespace: a connection string, and a session-enabled topic
// with a subscription "outbox-test".
const (
	EnvConnection = "OUTBOX_TEST_SERVICEBUS_CONNECTION"
	EnvTopic      = "OUTBOX_TEST_SERVICEBUS_TOPIC"
)

// TestRealNamespace publishes to and receives from a real Service Bus
// namespace, when OUTBOX_TEST_SERVICEBUS_CONNECTION and
// OUTBOX_TEST_SERVICEBUS_TOPIC name one (none is reachable from the
// project's CI: it skips there, and the fake's tests stand in).
func TestRealNamespace(t *testing.T) {
	conn, topic := os.Getenv(EnvConnection), os.Getenv(EnvTopic)
	if conn == "" || topic == "" {
		t.Skipf("no Service Bus namespace: set %s and %s (a session-enabled topic with a subscription outbox-test)", EnvConnection, EnvTopic)
	}
	client, closeClient, err := servicebus.NewSDKClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(context.Background())
	pub, err := servicebus.NewPublisher(servicebus.PublisherConfig{Client: client, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	agg := "real-" + runtime.NewEventID().String()
	for i := range 3 {
		if err := pub.Publish(topic, event(agg, i, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := servicebus.NewSubscriber(servicebus.SubscriberConfig{Client: client, Subscription: "outbox-test", SessionIdle: 5 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, ch, 3, "", "")
	if g := strings.Join(got[agg], " "); g != "0 1 2" {
		t.Errorf("received %s, want 0 1 2", g)
	}
}
