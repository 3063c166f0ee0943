package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func TestRegistryDecodesEveryVersionIntoTheLatest(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, 2)
	for _, tc := range []struct {
		version int
		want    PaidV2
	}{
		{1, PaidV2{EventVersion: 2, OccurredAt: t0, OrderID: "o-1", Seq: 1, Currency: "EUR"}},
		{2, PaidV2{EventVersion: 2, OccurredAt: t0, OrderID: "o-1", Seq: 1, Currency: "USD"}},
	} {
		t.Run(fmt.Sprintf("v%d", tc.version), func(t *testing.T) {
			msg := paidMessage(t, tc.version, "o-1", 1)
			env, err := runtime.EnvelopeFromMetadata(msg.UUID, msg.Metadata, msg.Payload)
			if err != nil {
				t.Fatal(err)
			}
			got, err := reg.DecodeEnvelope(env)
			if err != nil {
				t.Fatalf("DecodeEnvelope(v%d) = %v", tc.version, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeEnvelope(v%d) (-want +got):\n%s", tc.version, diff)
			}
		})
	}
	// Every registered key decodes (a key without a test payload above
	// would be an untested upcaster).
	if diff := cmp.Diff([]runtime.Key{{Type: paidType, Version: 1}, {Type: paidType, Version: 2}, {Type: "test.order_shipped", Version: 1}}, reg.Keys()); diff != "" {
		t.Errorf("Keys (-want +got):\n%s", diff)
	}
}

func TestHandlerReceivesTheLatestVersion(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv})
			var got []PaidV2
			var metas []consumer.Meta
			must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
				got = append(got, e)
				metas = append(metas, m)
				return nil
			}))
			h := c.HandlerFunc()
			m1, m2 := paidMessage(t, 1, "o-1", 1), paidMessage(t, 2, "o-1", 2)
			for _, msg := range []*message.Message{m1, m2} {
				if err := h(msg); err != nil {
					t.Fatalf("handler(%s) = %v", msg.UUID, err)
				}
			}
			want := []PaidV2{
				{EventVersion: 2, OccurredAt: t0, OrderID: "o-1", Seq: 1, Currency: "EUR"},
				{EventVersion: 2, OccurredAt: t0, OrderID: "o-1", Seq: 2, Currency: "USD"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for i, m := range metas {
				if m.EventVersion != i+1 || m.EventID.String() != []string{m1.UUID, m2.UUID}[i] || m.AggregateID != "o-1" || m.Attempt != 1 {
					t.Errorf("meta %d = %+v", i, m)
				}
			}
		})
	}
}

func TestHandleRejectsInvalidHandlers(t *testing.T) {
	t.Parallel()
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	reg := newRegistry(t, 2)
	noop := func(context.Context, *gorm.DB, PaidV2, consumer.Meta) error { return nil }

	c := newConsumer(t, reg, consumer.Config{Name: "c", DB: drv})
	if err := consumer.Handle(c, drv, func(context.Context, *gorm.DB, PaidV1, consumer.Meta) error { return nil }); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("Handle(v1, not latest) = %v, want ErrInvalidHandler", err)
	}
	if err := consumer.Handle(c, drv, func(context.Context, *gorm.DB, PaidV3, consumer.Meta) error { return nil }); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("Handle(v3, unregistered) = %v, want ErrInvalidHandler", err)
	}
	if err := consumer.Handle(c, drv, func(context.Context, *gorm.DB, runtime.Event, consumer.Meta) error { return nil }); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("Handle(interface) = %v, want ErrInvalidHandler", err)
	}
	must(t, consumer.Handle(c, drv, noop))
	if err := consumer.Handle(c, drv, noop); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("second Handle = %v, want ErrInvalidHandler", err)
	}
	if err := consumer.HandleWithoutInbox(c, func(context.Context, *PaidV2, consumer.Meta) error { return nil }); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("HandleWithoutInbox(*PaidV2) after Handle(PaidV2) = %v, want ErrInvalidHandler", err)
	}

	noDB := newConsumer(t, reg, consumer.Config{Name: "c"})
	if err := consumer.Handle(noDB, drv, noop); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("Handle without DB = %v, want ErrInvalidHandler", err)
	}
	must(t, consumer.HandleWithoutInbox(noDB, func(context.Context, PaidV2, consumer.Meta) error { return nil }))

	// Nil arguments are errors, not panics on every event (found by a new
	// user's trial: a nil handler dead-lettered every event).
	fresh := newConsumer(t, reg, consumer.Config{Name: "c2", DB: drv})
	for name, err := range map[string]error{
		"Handle nil fn":             consumer.Handle[*gorm.DB, PaidV2](fresh, drv, nil),
		"Handle nil driver":         consumer.Handle[*gorm.DB](fresh, nil, noop),
		"Handle another driver":     consumer.Handle(fresh, driver(t, db), noop),
		"HandleWithoutInbox nil fn": consumer.HandleWithoutInbox[PaidV2](fresh, nil),
		"Handle nil consumer":       consumer.Handle(nil, drv, noop),
	} {
		if !errors.Is(err, consumer.ErrInvalidHandler) {
			t.Errorf("%s = %v, want ErrInvalidHandler", name, err)
		}
	}
	if err := consumer.Migrate(context.Background(), nil, ""); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("Migrate(nil) = %v, want ErrInvalidConfig", err)
	}
	if err := fresh.Run(context.Background(), nil, "orders"); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("Run(nil subscriber) = %v, want ErrInvalidConfig", err)
	}
}

// nil2sqlite returns a SQLite database (the cheap dialect for tests that
// need any database).
func nil2sqlite(t *testing.T) *gorm.DB { return databases(t)["sqlite"](t) }

func TestPointerHandlerGetsValueEvents(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c"})
	var got *PaidV2
	must(t, consumer.HandleWithoutInbox(c, func(_ context.Context, e *PaidV2, _ consumer.Meta) error {
		got = e
		return nil
	}))
	if err := c.HandlerFunc()(paidMessage(t, 1, "o-1", 7)); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Seq != 7 || got.Currency != "EUR" {
		t.Errorf("handler got %+v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	pub := &recordingPublisher{}
	for _, tc := range []struct {
		name string
		cfg  consumer.Config
		want error
	}{
		{"no name", consumer.Config{}, consumer.ErrInvalidConfig},
		{"bad table", consumer.Config{Name: "c", Table: "inbox; DROP TABLE x"}, consumer.ErrInvalidTable},
		{"two dots", consumer.Config{Name: "c", Table: "a.b.c"}, consumer.ErrInvalidTable},
		{"negative backoff", consumer.Config{Name: "c", MinBackoff: -1}, consumer.ErrInvalidConfig},
		{"min > max", consumer.Config{Name: "c", MinBackoff: time.Second, MaxBackoff: time.Millisecond}, consumer.ErrInvalidConfig},
		{"negative nack delay", consumer.Config{Name: "c", NackDelay: -1}, consumer.ErrInvalidConfig},
		{"negative tx timeout", consumer.Config{Name: "c", TxTimeout: -1}, consumer.ErrInvalidConfig},
		{"skip unknown version", consumer.Config{Name: "c", UnknownVersion: consumer.ActionSkip}, consumer.ErrInvalidConfig},
		{"dead letter without publisher", consumer.Config{Name: "c", UnknownType: consumer.ActionDeadLetter}, consumer.ErrInvalidConfig},
		{"dead letter version without publisher", consumer.Config{Name: "c", UnknownVersion: consumer.ActionDeadLetter}, consumer.ErrInvalidConfig},
		{"dead letter topic without publisher", consumer.Config{Name: "c", DeadLetterTopic: "c.dlq"}, consumer.ErrInvalidConfig},
		{"bad action", consumer.Config{Name: "c", UnknownType: 42}, consumer.ErrInvalidConfig},
		{"valid minimal", consumer.Config{Name: "c"}, nil},
		{"valid schema table", consumer.Config{Name: "c", Table: "billing.inbox"}, nil},
		{"valid dead letter", consumer.Config{Name: "c", UnknownType: consumer.ActionDeadLetter, UnknownVersion: consumer.ActionDeadLetter, DeadLetterPublisher: pub}, nil},
		{"no retries", consumer.Config{Name: "c", MaxRetries: -1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Validate() = %v, want %v", err, tc.want)
			}
			_, err = consumer.New(runtime.NewRegistry(), tc.cfg)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("New() = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := consumer.New(nil, consumer.Config{Name: "c"}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("New(nil registry) = %v, want ErrInvalidConfig", err)
	}
}

func TestRedeliveryHasNoSecondEffect(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: o.record})
			must(t, consumer.Handle(c, drv, writeEffect("billing")))
			// A second consumer of the same events has its own inbox entries.
			c2 := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "stats", DB: drv, OnOutcome: o.record})
			must(t, consumer.Handle(c2, drv, writeEffect("stats")))

			msg := paidMessage(t, 2, "o-1", 1)
			for i := range 3 {
				if err := c.HandlerFunc()(redeliver(msg)); err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
			}
			must(t, c2.HandlerFunc()(redeliver(msg)))
			if diff := cmp.Diff(map[string]int{"applied": 2, "duplicate": 2}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if n := len(effects(t, db)); n != 2 {
				t.Errorf("effects = %d, want 2 (one per consumer)", n)
			}
			if n := count(t, db, consumer.DefaultTable); n != 2 {
				t.Errorf("inbox entries = %d, want 2", n)
			}
		})
	}
}

// TestCrashAfterCommitBeforeAck: the handler's transaction commits, then
// the process dies before the broker hears the ack. The broker delivers the
// message again; the inbox makes the redelivery a no-op that is acked.
func TestCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: o.record})
			must(t, consumer.Handle(c, drv, writeEffect("billing")))

			// The subscriber: a channel the test feeds, acking or not.
			deliveries := make(chan *message.Message)
			acked := make(chan *message.Message, 4)
			go func() {
				for msg := range deliveries {
					if err := c.HandlerFunc()(msg); err == nil {
						acked <- msg
					}
				}
				close(acked)
			}()
			msg := paidMessage(t, 2, "o-1", 1)
			first := redeliver(msg)
			deliveries <- first
			<-acked // the handler returned nil: committed; the "crash" drops the ack
			if o.last().Outcome != consumer.OutcomeApplied {
				t.Fatalf("first delivery: %v", o.last().Outcome)
			}
			// The restarted consumer gets the unacked message again.
			deliveries <- redeliver(msg)
			<-acked
			close(deliveries)
			if got := o.last(); got.Outcome != consumer.OutcomeDuplicate {
				t.Errorf("redelivery outcome = %v (%v), want duplicate", got.Outcome, got.Err)
			}
			if n := len(effects(t, db)); n != 1 {
				t.Errorf("effects = %d, want 1", n)
			}
		})
	}
}

// TestConcurrentDuplicates (reliability plan G9): the same event delivered
// 1,000 times from 2 goroutines has one effect; 1,000 events each delivered
// by 2 goroutines at once have one effect each.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: o.record, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
			must(t, consumer.Handle(c, drv, writeEffect("billing")))
			h := c.HandlerFunc()

			deliver := func(msgs []*message.Message) {
				t.Helper()
				var wg sync.WaitGroup
				errs := make(chan error, 2*len(msgs))
				start := make(chan struct{})
				for range 2 {
					wg.Go(func() {
						<-start
						for _, m := range msgs {
							if err := h(redeliver(m)); err != nil {
								errs <- err
							}
						}
					})
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("handler: %v", err)
				}
			}

			same := paidMessage(t, 2, "o-same", 1)
			msgs := make([]*message.Message, 500)
			for i := range msgs {
				msgs[i] = same
			}
			deliver(msgs) // 2 × 500 = 1,000 deliveries of one event
			if n := len(effects(t, db)); n != 1 {
				t.Fatalf("effects of one event delivered 1,000 times = %d, want 1", n)
			}
			if diff := cmp.Diff(map[string]int{"applied": 1, "duplicate": 999}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}

			distinct := make([]*message.Message, 1000)
			for i := range distinct {
				distinct[i] = paidMessage(t, 1+i%2, orderName(i%50), i)
			}
			deliver(distinct) // each event delivered twice, concurrently
			got := map[string]int{}
			for _, e := range effects(t, db) {
				got[e.EventID]++
			}
			want := map[string]int{same.UUID: 1}
			for _, m := range distinct {
				want[m.UUID] = 1
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("effects per event id (-want +got):\n%s", diff)
			}
			if n := count(t, db, consumer.DefaultTable); n != 1001 {
				t.Errorf("inbox entries = %d, want 1001", n)
			}
		})
	}
}

func TestHandlerErrorIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			var o outcomes
			dlq := &recordingPublisher{}
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{
				Name: "billing", DB: drv, OnOutcome: o.record,
				MaxRetries: 2, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
				DeadLetterPublisher: dlq, DeadLetterTopic: "billing.dlq",
			})
			var runs atomic.Int32
			write := writeEffect("billing")
			must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
				if err := write(ctx, tx, e, m); err != nil {
					return err
				}
				if e.OrderID == "bad" {
					runs.Add(1)
					return errBoom // after a write: the rollback must undo it
				}
				return nil
			}))
			h := c.HandlerFunc()
			bad := paidMessage(t, 2, "bad", 1)
			good := paidMessage(t, 2, "good", 1)
			if err := h(bad); err != nil {
				t.Fatalf("handler(bad) = %v, want nil (dead-lettered and acked)", err)
			}
			if err := h(good); err != nil {
				t.Fatalf("handler(good) = %v", err)
			}
			if runs.Load() != 3 {
				t.Errorf("handler ran %d times for the bad event, want 3 (1 + MaxRetries)", runs.Load())
			}
			res := o.results[0]
			var herr *consumer.HandlerError
			if res.Outcome != consumer.OutcomeDeadLettered || res.Reason != consumer.ReasonHandler || !errors.As(res.Err, &herr) || !errors.Is(res.Err, errBoom) || herr.Attempts != 3 {
				t.Errorf("bad event result = %+v", res)
			}
			if o.results[1].Outcome != consumer.OutcomeApplied {
				t.Errorf("good event outcome = %v", o.results[1].Outcome)
			}
			dead := dlq.topic("billing.dlq")
			if len(dead) != 1 {
				t.Fatalf("dead-lettered %d messages, want 1", len(dead))
			}
			d := dead[0]
			if d.UUID != bad.UUID || string(d.Payload) != string(bad.Payload) {
				t.Errorf("dead letter %s %s, want the original message %s %s", d.UUID, d.Payload, bad.UUID, bad.Payload)
			}
			for k, v := range bad.Metadata {
				if d.Metadata.Get(k) != v {
					t.Errorf("dead letter metadata %s = %q, want %q", k, d.Metadata.Get(k), v)
				}
			}
			for k, want := range map[string]string{
				consumer.MetadataDeadLetterReason:   "handler",
				consumer.MetadataDeadLetterConsumer: "billing",
				consumer.MetadataDeadLetterAttempts: "3",
				consumer.MetadataDeadLetterError:    herr.Error(),
			} {
				if got := d.Metadata.Get(k); got != want {
					t.Errorf("dead letter %s = %q, want %q", k, got, want)
				}
			}
			effs := effects(t, db)
			if len(effs) != 1 || effs[0].OrderID != "good" {
				t.Errorf("effects = %+v, want only the good event's", effs)
			}
			if n := count(t, db, consumer.DefaultTable); n != 1 {
				t.Errorf("inbox entries = %d, want 1 (a dead-lettered event can be re-driven)", n)
			}
		})
	}
}

func TestRetriedHandlerSucceeds(t *testing.T) {
	t.Parallel()
	db := nil2sqlite(t)
	drv := driver(t, db)
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv, OnOutcome: o.record, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	var attempts []int
	write := writeEffect("c")
	must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		attempts = append(attempts, m.Attempt)
		if err := write(ctx, tx, e, m); err != nil {
			return err
		}
		if m.Attempt == 1 {
			panic("first attempt panics")
		}
		if m.Attempt == 2 {
			return errBoom
		}
		return nil
	}))
	if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 2, 3}, attempts); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeApplied || r.Meta.Attempt != 3 {
		t.Errorf("result = %+v", r)
	}
	if n := len(effects(t, db)); n != 1 {
		t.Errorf("effects = %d, want 1 (failed attempts rolled back)", n)
	}
}

func TestHandlerErrorWithoutDeadLetterIsNacked(t *testing.T) {
	t.Parallel()
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", OnOutcome: o.record, MaxRetries: -1, NackDelay: time.Millisecond})
	var runs int
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		runs++
		return runtime.Permanent(errBoom)
	}))
	err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1))
	var herr *consumer.HandlerError
	if !errors.As(err, &herr) || !errors.Is(err, errBoom) || !runtime.IsPermanent(err) {
		t.Errorf("handler = %v, want a HandlerError wrapping errBoom", err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeFailed || r.Reason != consumer.ReasonHandler || runs != 1 {
		t.Errorf("result = %+v after %d runs", r, runs)
	}
}

func TestPermanentErrorSkipsRetries(t *testing.T) {
	t.Parallel()
	dlq := &recordingPublisher{}
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DeadLetterPublisher: dlq, MaxRetries: 5})
	var runs int
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		runs++
		return runtime.Permanent(errBoom)
	}))
	if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || len(dlq.topic("c.dlq")) != 1 {
		t.Errorf("runs = %d, dead letters on c.dlq = %d; want 1 and 1", runs, len(dlq.topic("c.dlq")))
	}
	if runtime.Permanent(nil) != nil || runtime.IsPermanent(errBoom) {
		t.Error("Permanent(nil) != nil or IsPermanent(plain error)")
	}
}

func TestDeadLetterPublishFailureNacks(t *testing.T) {
	t.Parallel()
	var o outcomes
	dlq := &recordingPublisher{fail: errors.New("broker down")}
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DeadLetterPublisher: dlq, MaxRetries: -1, NackDelay: time.Millisecond, OnOutcome: o.record})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error { return errBoom }))
	if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); !errors.Is(err, errBoom) || !errors.Is(err, dlq.fail) {
		t.Errorf("handler = %v, want both the handler and the publish error", err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeFailed {
		t.Errorf("outcome = %v, want failed", r.Outcome)
	}
}

// TestNewerVersionIsNackedNotLost: a v3 message reaches a consumer built
// with v1 and v2. It is not acked (the handler function returns the typed
// error, so the router nacks), leaves no trace in the inbox, and a newer
// deployment that knows v3 applies it.
func TestNewerVersionIsNackedNotLost(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			var o outcomes
			old := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: o.record, NackDelay: time.Millisecond})
			must(t, consumer.Handle(old, drv, writeEffect("billing")))
			msg := paidMessage(t, 3, "o-1", 1)
			for range 2 {
				err := old.HandlerFunc()(redeliver(msg))
				var uv *runtime.UnknownVersionError
				if !errors.As(err, &uv) || !uv.Newer() || !errors.Is(err, runtime.ErrUnknownVersion) {
					t.Fatalf("handler(v3) = %v, want an UnknownVersionError (newer)", err)
				}
			}
			if r := o.last(); r.Outcome != consumer.OutcomeNacked || r.Reason != consumer.ReasonUnknownVersion || r.Meta.EventVersion != 3 {
				t.Errorf("result = %+v", r)
			}
			if n := count(t, db, consumer.DefaultTable); n != 0 {
				t.Fatalf("inbox entries = %d after nacks, want 0", n)
			}

			// The newer deployment.
			upgraded := newConsumer(t, newRegistry(t, 3), consumer.Config{Name: "billing", DB: drv, OnOutcome: o.record})
			var notes []string
			must(t, consumer.Handle(upgraded, drv, func(ctx context.Context, tx *gorm.DB, e PaidV3, m consumer.Meta) error {
				notes = append(notes, e.Note)
				return writeEffect("billing")(ctx, tx, e.PaidV2, m)
			}))
			if err := upgraded.HandlerFunc()(redeliver(msg)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"gift"}, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			if n := len(effects(t, db)); n != 1 {
				t.Errorf("effects = %d, want 1", n)
			}
		})
	}
}

func TestNewerVersionDeadLettered(t *testing.T) {
	t.Parallel()
	dlq := &recordingPublisher{}
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DeadLetterPublisher: dlq, UnknownVersion: consumer.ActionDeadLetter, OnOutcome: o.record})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		t.Error("handler ran for an unknown version")
		return nil
	}))
	if err := c.HandlerFunc()(paidMessage(t, 3, "o-1", 1)); err != nil {
		t.Fatal(err)
	}
	dead := dlq.topic("c.dlq")
	if len(dead) != 1 || dead[0].Metadata.Get(consumer.MetadataDeadLetterReason) != "unknown_version" || dead[0].Metadata.Get(consumer.MetadataDeadLetterAttempts) != "0" {
		t.Fatalf("dead letters = %v", dead)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeDeadLettered || r.Reason != consumer.ReasonUnknownVersion {
		t.Errorf("result = %+v", r)
	}
}

func TestUnknownTypes(t *testing.T) {
	t.Parallel()
	unknown := func(t *testing.T) *message.Message {
		msg := paidMessage(t, 1, "o-1", 1)
		msg.Metadata.Set(runtime.MetadataEventType, "test.order_refunded")
		return msg
	}
	t.Run("skip by default", func(t *testing.T) {
		var o outcomes
		c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", OnOutcome: o.record})
		if err := c.HandlerFunc()(unknown(t)); err != nil {
			t.Fatalf("handler = %v, want nil (skipped)", err)
		}
		r := o.last()
		var ut *runtime.UnknownEventTypeError
		if r.Outcome != consumer.OutcomeSkipped || r.Reason != consumer.ReasonUnknownType || !errors.As(r.Err, &ut) || ut.Type != "test.order_refunded" {
			t.Errorf("result = %+v", r)
		}
	})
	t.Run("dead letter", func(t *testing.T) {
		dlq := &recordingPublisher{}
		c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DeadLetterPublisher: dlq, UnknownType: consumer.ActionDeadLetter})
		if err := c.HandlerFunc()(unknown(t)); err != nil {
			t.Fatal(err)
		}
		if d := dlq.topic("c.dlq"); len(d) != 1 || d[0].Metadata.Get(consumer.MetadataDeadLetterReason) != "unknown_type" {
			t.Errorf("dead letters = %v", d)
		}
	})
	t.Run("nack", func(t *testing.T) {
		c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", UnknownType: consumer.ActionNack, NackDelay: time.Millisecond})
		if err := c.HandlerFunc()(unknown(t)); !errors.Is(err, runtime.ErrUnknownEventType) {
			t.Errorf("handler = %v, want ErrUnknownEventType", err)
		}
	})
	t.Run("registered but not handled", func(t *testing.T) {
		var o outcomes
		c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", OnOutcome: o.record})
		if err := c.HandlerFunc()(toMessage(t, Shipped{EventVersion: 1, OccurredAt: t0, OrderID: "o-1"}, "o-1")); err != nil {
			t.Fatal(err)
		}
		if r := o.last(); r.Outcome != consumer.OutcomeIgnored || r.Err != nil {
			t.Errorf("result = %+v", r)
		}
	})
}

func TestPoisonMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*message.Message)
		reason consumer.Reason
		is     error
	}{
		{"missing type", func(m *message.Message) { delete(m.Metadata, runtime.MetadataEventType) }, consumer.ReasonMalformed, runtime.ErrInvalidEnvelope},
		{"bad version", func(m *message.Message) { m.Metadata.Set(runtime.MetadataEventVersion, "two") }, consumer.ReasonMalformed, runtime.ErrInvalidEnvelope},
		{"bad event id", func(m *message.Message) { m.Metadata.Set(runtime.MetadataEventID, "nope") }, consumer.ReasonMalformed, runtime.ErrInvalidEnvelope},
		{"nil event id", func(m *message.Message) { m.Metadata.Set(runtime.MetadataEventID, uuid.Nil.String()) }, consumer.ReasonMalformed, consumer.ErrNilEventID},
		{"nil message uuid without event id", func(m *message.Message) {
			delete(m.Metadata, runtime.MetadataEventID)
			m.UUID = uuid.Nil.String()
		}, consumer.ReasonMalformed, runtime.ErrInvalidEnvelope},
		{"missing field", func(m *message.Message) {
			m.Payload = []byte(`{"event_version":2,"occurred_at":"2026-03-01T12:00:00Z","seq":1}`)
		}, consumer.ReasonDecode, nil},
		{"not json", func(m *message.Message) { m.Payload = []byte(`not json`) }, consumer.ReasonDecode, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := paidMessage(t, 2, "o-1", 1)
			tc.mutate(msg)

			var o outcomes
			var logs runtimetest.LogBuffer
			noDLQ := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", OnOutcome: o.record, NackDelay: time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			must(t, consumer.HandleWithoutInbox(noDLQ, func(context.Context, PaidV2, consumer.Meta) error {
				t.Error("handler ran for a poison message")
				return nil
			}))
			if err := noDLQ.HandlerFunc()(redeliver(msg)); err == nil {
				t.Error("without a dead-letter publisher: handler = nil, want an error (nack)")
			}
			if r := o.last(); r.Outcome != consumer.OutcomeFailed || r.Reason != tc.reason || (tc.is != nil && !errors.Is(r.Err, tc.is)) {
				t.Errorf("without a dead-letter publisher: result = %+v", r)
			}
			// A malformed message's result (and log line) still names the
			// type its metadata gives, for the operator who looks for it.
			if r := o.last(); r.Meta.EventType != msg.Metadata.Get(runtime.MetadataEventType) {
				t.Errorf("result's event type = %q, want %q from the metadata", r.Meta.EventType, msg.Metadata.Get(runtime.MetadataEventType))
			}
			// What the message does not give is left out of the log line,
			// not logged as a zero version or a nil event id.
			if l := logs.String(); !strings.Contains(l, "consumer: message nacked") || strings.Contains(l, "event_version=0") ||
				strings.Contains(l, "event_id="+uuid.Nil.String()) || strings.Contains(l, `event_type=""`) {
				t.Errorf("log of the nacked message:\n%s", l)
			}

			dlq := &recordingPublisher{}
			withDLQ := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", OnOutcome: o.record, DeadLetterPublisher: dlq})
			must(t, consumer.HandleWithoutInbox(withDLQ, func(context.Context, PaidV2, consumer.Meta) error {
				t.Error("handler ran for a poison message")
				return nil
			}))
			if err := withDLQ.HandlerFunc()(redeliver(msg)); err != nil {
				t.Errorf("with a dead-letter publisher: handler = %v, want nil", err)
			}
			if d := dlq.topic("c.dlq"); len(d) != 1 || d[0].Metadata.Get(consumer.MetadataDeadLetterReason) != string(tc.reason) || d[0].UUID != msg.UUID {
				t.Errorf("dead letters = %v", d)
			}
		})
	}
}

func TestWithoutInboxRunsEveryDelivery(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c"})
	var runs int
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		runs++
		return nil
	}))
	msg := paidMessage(t, 2, "o-1", 1)
	for range 3 {
		must(t, c.HandlerFunc()(redeliver(msg)))
	}
	if runs != 3 {
		t.Errorf("runs = %d, want 3", runs)
	}
}

func TestTypeMismatchIsNacked(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	// A decoder that returns the wrong type for the latest version.
	must(t, reg.Register(runtime.Key{Type: paidType, Version: 1}, 2, func([]byte) (runtime.Event, error) { return Shipped{}, nil }))
	must(t, reg.Register(runtime.Key{Type: paidType, Version: 2}, 2, func([]byte) (runtime.Event, error) { return Shipped{}, nil }))
	dlq := &recordingPublisher{}
	c := newConsumer(t, reg, consumer.Config{Name: "c", NackDelay: time.Millisecond, DeadLetterPublisher: dlq})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error { return nil }))
	if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); !errors.Is(err, consumer.ErrTypeMismatch) {
		t.Errorf("handler = %v, want ErrTypeMismatch", err)
	}
	if len(dlq.topic("c.dlq")) != 0 {
		t.Error("a deployment bug dead-lettered the message")
	}
}

func TestCancelledContextEndsRetriesAndNackDelay(t *testing.T) {
	t.Parallel()
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", MinBackoff: time.Hour, MaxBackoff: time.Hour, NackDelay: time.Hour, OnOutcome: o.record})
	ctx, cancel := context.WithCancel(context.Background())
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		cancel() // shutdown begins during the first attempt
		return errBoom
	}))
	msg := paidMessage(t, 2, "o-1", 1)
	msg.SetContext(ctx)
	if err := c.HandlerFunc()(msg); !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
		t.Errorf("handler = %v, want errBoom and context.Canceled", err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeFailed || r.Reason != consumer.ReasonCanceled {
		t.Errorf("result = %+v", r)
	}

	// A nack's delay ends with the context too.
	msg = paidMessage(t, 3, "o-1", 1)
	msg.SetContext(ctx)
	if err := c.HandlerFunc()(msg); !errors.Is(err, runtime.ErrUnknownVersion) {
		t.Errorf("handler = %v, want ErrUnknownVersion", err)
	}
}

func TestInboxFailureIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	db := nil2sqlite(t)
	drv := driver(t, db)
	dlq := &recordingPublisher{}
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv, Table: "missing_inbox", DeadLetterPublisher: dlq,
		MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond, NackDelay: time.Millisecond, OnOutcome: o.record})
	must(t, consumer.Handle(c, drv, writeEffect("c")))
	err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1))
	var ie *consumer.InboxError
	if !errors.As(err, &ie) {
		t.Errorf("handler = %v, want an InboxError", err)
	}
	if r := o.last(); r.Outcome != consumer.OutcomeFailed || r.Reason != consumer.ReasonInbox || r.Meta.Attempt != 1+consumer.DefaultMaxRetries {
		t.Errorf("result = %+v", r)
	}
	if len(dlq.topic("c.dlq")) != 0 {
		t.Error("an inbox failure dead-lettered the message")
	}
}

func TestOutcomeStrings(t *testing.T) {
	t.Parallel()
	got := map[string]bool{}
	for o := consumer.OutcomeApplied; o <= consumer.OutcomeFailed; o++ {
		got[o.String()] = o.Acked()
	}
	want := map[string]bool{"applied": true, "duplicate": true, "ignored": true, "skipped": true, "nacked": false, "dead_lettered": true, "failed": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if s := consumer.Outcome(0).String(); s != "unknown" {
		t.Errorf("Outcome(0) = %q", s)
	}
}
