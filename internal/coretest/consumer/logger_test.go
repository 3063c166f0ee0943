package consumer_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// TestNilLoggerLogsToSlogDefault: a consumer configured without a Logger
// reports what it handles itself (here, a skipped message of an unknown type)
// through slog.Default, so failures are visible without configuration.
func TestNilLoggerLogsToSlogDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c"})
	msg := paidMessage(t, 1, "o-1", 1)
	msg.Metadata.Set(runtime.MetadataEventType, "test.order_refunded")
	if err := c.HandlerFunc()(msg); err != nil {
		t.Fatalf("handler = %v, want nil (skipped)", err)
	}
	got := buf.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, `msg="consumer: message skipped"`) || strings.Count(got, "\n") != 1 {
		t.Errorf("slog.Default received %q, want one WARN line \"consumer: message skipped\"", got)
	}
}
