package kafka_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestConfigLoggerReceivesLogs checks that the *slog.Logger in
// PublisherConfig.Logger receives the publisher's log records, with
// Watermill's fields as attributes.
func TestConfigLoggerReceivesLogs(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	var buf runtimetest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, Logger: logger})
	if err := pub.Publish(topic, newEvent("order-1", "x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := buf.String()
	for _, want := range []string{"level=DEBUG", `msg="published messages"`, "component=kafka_publisher", "topic=" + topic, "messages=1"} {
		if !strings.Contains(got, want) {
			t.Errorf("log output lacks %q; got:\n%s", want, got)
		}
	}
}
