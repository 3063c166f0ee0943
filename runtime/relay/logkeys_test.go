package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// recordHandler is a slog.Handler that keeps every record's level, message
// and attributes (values as text), for tests of the log contract.
type recordHandler struct {
	mu      sync.Mutex
	records []logRecord
}

type logRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rec)
	return nil
}

// find returns the first record with message msg.
func (h *recordHandler) find(msg string) (logRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Msg == msg {
			return r, true
		}
	}
	return logRecord{}, false
}

// TestLogKeysOfPublishFailure pins the log contract of a failed publish:
// its constant message, its level, and the documented attribute keys
// (README "Logs"), with the failed message's outbox id, topic, event id and
// type.
func TestLogKeysOfPublishFailure(t *testing.T) {
	mem := &runtimetest.MemoryStore{RetryDelay: never}
	mem.Add(newMessage(1, "orders"))
	pub := &fakePublisher{fn: func(string, []*message.Message) error {
		return runtime.Permanent(errors.New("message too large"))
	}}
	var h recordHandler
	batches := newBatchRecorder()
	r, err := relay.New(mem, pub, relay.Config{PollInterval: never, Logger: slog.New(&h), OnBatch: batches.OnBatch})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	batches.untilCount(t, 1)

	var got logRecord
	deadline := time.Now().Add(waitTimeout)
	for ok := false; !ok; got, ok = h.find("relay: publish failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no \"relay: publish failed\" record within %v", waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	want := logRecord{Level: slog.LevelWarn, Msg: "relay: publish failed", Attrs: map[string]string{
		"outbox_id":  "1",
		"topic":      "orders",
		"event_id":   eventID(1).String(),
		"event_type": "orders.order_placed",
		"error":      "outbox: permanent failure: message too large",
		"permanent":  "true",
		"messages":   "1",
		"published":  "0",
		"attempt":    "1",
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log record (-want +got):\n%s", diff)
	}
}
