package kafka_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// lockedBuffer is a bytes.Buffer safe for a handler writing from several
// goroutines while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestConfigLoggerReceivesLogs checks that the *slog.Logger in
// PublisherConfig.Logger receives the publisher's log records, with
// Watermill's fields as attributes.
func TestConfigLoggerReceivesLogs(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	var buf lockedBuffer
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
