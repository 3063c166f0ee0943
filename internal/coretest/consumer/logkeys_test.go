package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime/consumer"
)

// recordHandler is a slog.Handler that keeps every record's level, message
// and attributes (those of Logger.With included; values as text), for tests
// of the log contract.
type recordHandler struct {
	mu      *sync.Mutex
	records *[]logRecord
	with    []slog.Attr
}

type logRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func newRecordHandler() *recordHandler {
	return &recordHandler{mu: new(sync.Mutex), records: new([]logRecord)}
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.with = append(append([]slog.Attr(nil), h.with...), as...)
	return &c
}

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range h.with {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, rec)
	return nil
}

// find returns the first record with message msg.
func (h *recordHandler) find(msg string) (logRecord, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.records {
		if r.Msg == msg {
			return r, true
		}
	}
	return logRecord{}, false
}

// all returns the records with message msg, in the order logged.
func (h *recordHandler) all(msg string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range *h.records {
		if r.Msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// TestLogKeysOfHandlerFailure pins the log contract of a failing handler in
// a router: the retry line and the dead-letter line, with their constant
// messages, levels and the documented attribute keys (README "Logs").
func TestLogKeysOfHandlerFailure(t *testing.T) {
	t.Parallel()
	ps := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	h := newRecordHandler()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{
		Name:                "billing",
		Logger:              slog.New(h),
		MaxRetries:          1,
		MinBackoff:          time.Millisecond,
		DeadLetterPublisher: ps,
		DeadLetterTopic:     "orders.dead",
	})
	err := consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		return errors.New("card declined")
	})
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddConsumerHandler("billing", "orders", ps, c.HandlerFunc())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	<-router.Running()
	dead, err := ps.Subscribe(ctx, "orders.dead")
	if err != nil {
		t.Fatal(err)
	}
	msg := paidMessage(t, 2, "o-1", 1)
	if err := ps.Publish("orders", msg); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-dead:
		m.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not dead-lettered within 10 s")
	}

	common := map[string]string{
		"consumer":      "billing",
		"message_uuid":  msg.UUID,
		"event_id":      msg.UUID,
		"event_type":    paidType,
		"event_version": "2",
		"topic":         "orders",
		"attempt":       "1",
	}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, want := range []logRecord{
		{slog.LevelWarn, "consumer: attempt failed, retrying", with(map[string]string{
			"error": "card declined", "backoff": "", // jittered: checked for presence below
		})},
		{slog.LevelWarn, "consumer: message dead-lettered", with(map[string]string{
			"attempt": "2", "reason": "handler", "dead_letter_topic": "orders.dead",
			"error": `consumer: handler for ` + paidType + ` failed after 2 attempt(s): card declined`,
		})},
	} {
		// The dead-letter line is written after the dead-letter publish
		// returns, which may be after the message arrived: poll.
		got, ok := h.find(want.Msg)
		for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); got, ok = h.find(want.Msg) {
			time.Sleep(time.Millisecond)
		}
		if !ok {
			t.Errorf("no %q record within 10 s", want.Msg)
			continue
		}
		if b, ok := want.Attrs["backoff"]; ok && b == "" && got.Attrs["backoff"] != "" {
			want.Attrs["backoff"] = got.Attrs["backoff"]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("log record (-want +got):\n%s", diff)
		}
	}
}
