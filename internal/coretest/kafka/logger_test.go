package kafka_test

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TestWriterRetriesAreLogged: a produce attempt that kafka-go's writer
// retries itself (here the broker refuses the first one as not the
// partition's leader) is logged at WARN through PublisherConfig.Logger,
// though Publish succeeds: such a retry after an attempt that timed out
// can write its records twice, and nothing else would show it.
func TestWriterRetriesAreLogged(t *testing.T) {
	t.Parallel()
	cluster, brokers, topic := startCluster(t)
	var refused atomic.Bool
	fake := cluster.Fake()
	fake.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if refused.Swap(true) {
			return nil, nil, false
		}
		return kafkatest.RefuseProduce(r.(*kmsg.ProduceRequest), kerr.NotLeaderForPartition.Code), nil, true
	})
	var buf runtimetest.LogBuffer
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err := pub.Publish(topic, newEvent("order-1", "x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if !refused.Load() {
		t.Fatal("the broker refused no produce request")
	}
	got := buf.String()
	for _, want := range []string{"level=WARN", `msg="kafka-go writer error"`, "component=kafka_publisher", topic, "attempt 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("log output lacks %q; got:\n%s", want, got)
		}
	}
}
