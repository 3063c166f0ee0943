package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

const nackedMsg = "consumer: message nacked"

// failures records the failed deliveries a consumer reports ([Config.OnOutcome])
// and closes reached once there are want of them.
type failures struct {
	mu      sync.Mutex
	want    int
	results []consumer.Result
	reached chan struct{}
}

func newFailures(want int) *failures {
	return &failures{want: want, reached: make(chan struct{})}
}

func (f *failures) record(r consumer.Result) {
	if r.Outcome != consumer.OutcomeFailed {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = append(f.results, r)
	if len(f.results) == f.want {
		close(f.reached)
	}
}

func (f *failures) first() consumer.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[0]
}

func (f *failures) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.results)
}

// runUntilFailed runs c over one stream of msgs until f has seen its
// failures, then stops Run and waits for it to return.
func runUntilFailed(t *testing.T, c *consumer.Consumer, f *failures, msgs ...*message.Message) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, streamSubscriber{[][]*message.Message{msgs}}, "orders") }()
	select {
	case <-f.reached:
	case err := <-done:
		t.Fatalf("Run returned %v before %d failed deliveries", err, f.want)
	case <-time.After(30 * time.Second):
		t.Fatalf("%d failed deliveries within 30 s, want %d", f.count(), f.want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}

// ofMessage returns the records about the message with uuid.
func ofMessage(records []logRecord, uuid string) []logRecord {
	var out []logRecord
	for _, r := range records {
		if r.Attrs["message_uuid"] == uuid {
			out = append(out, r)
		}
	}
	return out
}

// TestLogKeysOfRunFailure: a message that Run cannot apply and holds back
// in place (no dead-letter publisher) is logged, with the line a nack gets
// in a router: an event whose upcaster fails, and an event whose handler
// fails, each behind an event that is applied.
func TestLogKeysOfRunFailure(t *testing.T) {
	t.Parallel()
	errUpcast := errors.New("upcast v1 to v2: no currency for this order")
	for _, tc := range []struct {
		name    string
		version int // of the failing message
		reason  string
		attempt string // "" when the handler never ran
		err     func(f *failures) string
	}{
		{"decode", 1, "decode", "", func(f *failures) string { return f.first().Err.Error() }},
		{"handler", 2, "handler", "1", func(*failures) string {
			return "consumer: handler for " + paidType + " failed after 1 attempt(s): card declined"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := nil2sqlite(t)
			drv := driver(t, db)
			reg := runtime.NewRegistry()
			must(t, reg.Register(runtime.Key{Type: paidType, Version: 1}, 2, func([]byte) (runtime.Event, error) {
				return nil, errUpcast // a hand-written upcaster that fails
			}))
			must(t, reg.Register(runtime.Key{Type: paidType, Version: 2}, 2, func(p []byte) (runtime.Event, error) {
				return decodePaid(2, 2, p)
			}))
			h := newRecordHandler()
			f := newFailures(1)
			c := newConsumer(t, reg, consumer.Config{Name: "billing", DB: drv, Logger: slog.New(h), OnOutcome: f.record,
				MaxRetries: -1, NackDelay: time.Millisecond, MaxNackDelay: time.Millisecond})
			good, bad := paidMessage(t, 2, "o-1", 1), paidMessage(t, tc.version, "o-2", 1)
			write := writeEffect("billing")
			must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
				if m.EventID.String() == bad.UUID {
					return errors.New("card declined")
				}
				return write(ctx, tx, e, m)
			}))

			runUntilFailed(t, c, f, good, bad)

			if len(effects(t, db)) != 1 {
				t.Errorf("effects = %d, want the good event's", len(effects(t, db)))
			}
			got := ofMessage(h.all(nackedMsg), bad.UUID)
			if len(got) == 0 {
				t.Fatalf("no %q record for the failing message", nackedMsg)
			}
			want := logRecord{Level: slog.LevelWarn, Msg: nackedMsg, Attrs: map[string]string{
				"consumer":      "billing",
				"message_uuid":  bad.UUID,
				"event_id":      bad.UUID,
				"event_type":    paidType,
				"event_version": strconv.Itoa(tc.version),
				"topic":         "orders",
				"reason":        tc.reason,
				"error":         tc.err(f),
				"nacks":         "1",
				"backoff":       "1ms",
			}}
			if tc.attempt != "" {
				want.Attrs["attempt"] = tc.attempt
			}
			if diff := cmp.Diff(want, got[0]); diff != "" {
				t.Errorf("first log record of the failing message (-want +got):\n%s", diff)
			}
			if tc.name == "decode" && !strings.Contains(got[0].Attrs["error"], errUpcast.Error()) {
				t.Errorf("error = %q, want the upcaster's", got[0].Attrs["error"])
			}
		})
	}
}

// TestRunStalledMessageLogsWarnSparingly: a message whose handler always
// fails is tried again and again; each try is logged once, at WARN only on
// the 1st, 2nd, 4th, 8th, ... try in a row (its retry lines too), at DEBUG
// otherwise.
func TestRunStalledMessageLogsWarnSparingly(t *testing.T) {
	t.Parallel()
	const tries = 40
	h := newRecordHandler()
	f := newFailures(tries)
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", Logger: slog.New(h), OnOutcome: f.record,
		MaxRetries: 1, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
		NackDelay: time.Millisecond, MaxNackDelay: time.Millisecond})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		return errors.New("card declined")
	}))
	bad := paidMessage(t, 2, "o-1", 1)

	runUntilFailed(t, c, f, bad)

	nacks := ofMessage(h.all(nackedMsg), bad.UUID)
	if len(nacks) < tries {
		t.Fatalf("%d %q records for %d failed tries, want one per try", len(nacks), nackedMsg, f.count())
	}
	warn := 0
	for i, r := range nacks {
		n := i + 1
		if r.Attrs["nacks"] != strconv.Itoa(n) {
			t.Errorf("record %d: nacks = %q, want %d", i, r.Attrs["nacks"], n)
		}
		wantLevel := slog.LevelDebug
		if n&(n-1) == 0 {
			wantLevel = slog.LevelWarn
			warn++
		}
		if r.Level != wantLevel {
			t.Errorf("try %d logged at %v, want %v", n, r.Level, wantLevel)
		}
	}
	if want := bits.Len(uint(len(nacks))); warn != want {
		t.Errorf("%d WARN nack lines for %d tries, want %d", warn, len(nacks), want)
	}
	retries := ofMessage(h.all("consumer: attempt failed, retrying"), bad.UUID)
	warnRetries := 0
	for _, r := range retries {
		if r.Level == slog.LevelWarn {
			warnRetries++
		}
	}
	if len(retries) < tries || warnRetries > warn+1 {
		t.Errorf("%d retry lines, %d of them WARN, for %d tries; want one per try, WARN only with a WARN nack",
			len(retries), warnRetries, len(nacks))
	}
}

// TestLogKeysOfNackInHandlerFunc: the router mode logs a failed delivery
// with the same line as Run, and with the same levels for a message
// delivered again and again.
func TestLogKeysOfNackInHandlerFunc(t *testing.T) {
	t.Parallel()
	h := newRecordHandler()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", Logger: slog.New(h),
		MaxRetries: -1, NackDelay: time.Millisecond, MaxNackDelay: time.Millisecond})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		return errors.New("card declined")
	}))
	msg := paidMessage(t, 2, "o-1", 1)
	for i := range 5 {
		if err := c.HandlerFunc()(redeliver(msg)); err == nil {
			t.Fatalf("delivery %d: handler = nil, want an error (nack)", i+1)
		}
	}
	got := h.all(nackedMsg)
	var levels []string
	for i, r := range got {
		levels = append(levels, fmt.Sprintf("%s %s", r.Attrs["nacks"], r.Level))
		if i == 0 {
			want := logRecord{Level: slog.LevelWarn, Msg: nackedMsg, Attrs: map[string]string{
				"consumer":      "billing",
				"message_uuid":  msg.UUID,
				"event_id":      msg.UUID,
				"event_type":    paidType,
				"event_version": "2",
				"topic":         "",
				"attempt":       "1",
				"reason":        "handler",
				"error":         "consumer: handler for " + paidType + " failed after 1 attempt(s): card declined",
				"nacks":         "1",
				"backoff":       "1ms",
			}}
			if diff := cmp.Diff(want, r); diff != "" {
				t.Errorf("first log record (-want +got):\n%s", diff)
			}
		}
	}
	if diff := cmp.Diff([]string{"1 WARN", "2 WARN", "3 DEBUG", "4 WARN", "5 DEBUG"}, levels); diff != "" {
		t.Errorf("nack lines of five deliveries (-want +got):\n%s", diff)
	}
}

// TestFailedDeadLetterLogsOneLine: when the dead-letter publish fails too,
// the nack's error attribute holds both errors on one line (errors.Join
// separates them with a line break, which split the record in a trial's
// line-oriented log), the publish error first.
func TestFailedDeadLetterLogsOneLine(t *testing.T) {
	t.Parallel()
	h := newRecordHandler()
	dlq := &recordingPublisher{fail: errors.New("Unknown Topic Or Partition")}
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", Logger: slog.New(h),
		MaxRetries: -1, DeadLetterPublisher: dlq, NackDelay: time.Millisecond, MaxNackDelay: time.Millisecond})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		return errors.New("card declined")
	}))
	if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); err == nil {
		t.Fatal("handler = nil, want an error (nack: the dead-letter publish failed)")
	}
	got := h.all(nackedMsg)
	if len(got) != 1 {
		t.Fatalf("%d nack records, want 1", len(got))
	}
	want := `publish to dead-letter topic "billing.dlq": Unknown Topic Or Partition; consumer: handler for ` + paidType + ` failed after 1 attempt(s): card declined`
	if e := got[0].Attrs["error"]; e != want {
		t.Errorf("error attribute = %q, want %q", e, want)
	}
}
