package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// TestDeadLetterTableRedrive: a consumer whose dead-letter publisher is a
// DeadLetterTable writes the message it gives up on to the table, with the
// topic it came from, the reason and the error; an operator lists it,
// shows it, and re-drives it once the cause is fixed: it is published
// again to its topic, the consumer applies it (once: a second re-drive is
// a duplicate for the inbox), and the row records the re-drive. A discard
// deletes the row.
func TestDeadLetterTableRedrive(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := open(t)
			drv := driver(t, db)
			must(t, consumer.MigrateDeadLetters(ctx, drv, ""))
			must(t, consumer.MigrateDeadLetters(ctx, drv, "")) // safe to run again
			dlq, err := consumer.NewDeadLetterTable(drv, "")
			must(t, err)
			results := make(chan consumer.Result, 16)
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, MaxRetries: 1,
				MinBackoff: time.Millisecond, DeadLetterPublisher: dlq, OnOutcome: func(r consumer.Result) { results <- r }})
			var broken atomic.Bool
			broken.Store(true)
			must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
				if broken.Load() {
					return errors.New("the mail server refuses order " + e.OrderID)
				}
				return writeEffect("billing")(ctx, tx, e, m)
			}))

			pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
			t.Cleanup(func() { pubSub.Close() })
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			must(t, err)
			router.AddConsumerHandler("billing", "payments", pubSub, c.HandlerFunc())
			rctx, cancel := context.WithCancel(ctx)
			t.Cleanup(func() { cancel(); router.Close() })
			go router.Run(rctx)
			<-router.Running()
			next := func(want consumer.Outcome) consumer.Result {
				t.Helper()
				select {
				case r := <-results:
					if r.Outcome != want {
						t.Fatalf("outcome %v (%v), want %v", r.Outcome, r.Err, want)
					}
					return r
				case <-time.After(30 * time.Second):
					t.Fatalf("no outcome within 30s, want %v", want)
				}
				return consumer.Result{}
			}

			msg := paidMessage(t, 2, "o-7", 1)
			must(t, pubSub.Publish("payments", msg))
			next(consumer.OutcomeDeadLettered)

			list, err := dlq.List(ctx, sqlstore.DeadLetterQuery{Consumer: "billing"})
			must(t, err)
			if len(list) != 1 {
				t.Fatalf("dead letters = %+v, want one", list)
			}
			dl := list[0]
			if dl.MessageUUID != msg.UUID || dl.Topic != "payments" || dl.Reason != string(consumer.ReasonHandler) ||
				dl.Attempts != 2 || dl.Consumer != "billing" || string(dl.Payload) != string(msg.Payload) || !dl.RedrivenAt.IsZero() {
				t.Errorf("dead letter = %+v", dl)
			}
			if want := "the mail server refuses order o-7"; !strings.Contains(dl.Error, want) {
				t.Errorf("dead letter's error %q does not say %q", dl.Error, want)
			}
			if dl.Metadata[runtime.MetadataEventType] != paidType || dl.Metadata[consumer.MetadataDeadLetterReason] != "" {
				t.Errorf("dead letter's metadata = %v: want the message's, without the dead-letter keys", dl.Metadata)
			}
			if time.Since(dl.DeadLetteredAt) > time.Hour || dl.DeadLetteredAt.After(time.Now().Add(time.Minute)) {
				t.Errorf("dead-lettered at %v", dl.DeadLetteredAt)
			}
			if got, err := dlq.Get(ctx, dl.ID); err != nil || got.MessageUUID != msg.UUID {
				t.Errorf("Get(%d) = %+v, %v", dl.ID, got, err)
			}
			if _, err := dlq.Get(ctx, dl.ID+1000); !errors.Is(err, sqlstore.ErrNotFound) {
				t.Errorf("Get(unknown id) = %v, want ErrNotFound", err)
			}
			counts, err := dlq.Counts(ctx)
			must(t, err)
			if len(counts) != 1 || counts[0].Consumer != "billing" || counts[0].Waiting != 1 || counts[0].Redriven != 0 || !counts[0].Oldest.Equal(dl.DeadLetteredAt) {
				t.Errorf("counts = %+v", counts)
			}
			if n := len(effects(t, db)); n != 0 {
				t.Fatalf("%d effects before the re-drive", n)
			}

			broken.Store(false) // the operator fixed the mail server
			if _, err := dlq.Redrive(ctx, pubSub, dl.ID, ""); err != nil {
				t.Fatal(err)
			}
			next(consumer.OutcomeApplied)
			if e := effects(t, db); len(e) != 1 || e[0].OrderID != "o-7" {
				t.Errorf("effects after the re-drive = %+v", e)
			}
			if list, err := dlq.List(ctx, sqlstore.DeadLetterQuery{}); err != nil || len(list) != 0 {
				t.Errorf("waiting dead letters after the re-drive = %+v, %v; want none", list, err)
			}
			all, err := dlq.List(ctx, sqlstore.DeadLetterQuery{Redriven: true})
			must(t, err)
			if len(all) != 1 || all[0].RedrivenAt.IsZero() {
				t.Errorf("dead letters with the re-driven = %+v: want the row, re-driven", all)
			}
			// Re-driven twice: the inbox applies it once.
			if _, err := dlq.Redrive(ctx, pubSub, dl.ID, ""); err != nil {
				t.Fatal(err)
			}
			next(consumer.OutcomeDuplicate)
			if n, err := dlq.Discard(ctx, dl.ID, dl.ID+1000); err != nil || n != 1 {
				t.Errorf("Discard = %d, %v; want 1", n, err)
			}
			if _, err := dlq.Redrive(ctx, pubSub, dl.ID, ""); !errors.Is(err, sqlstore.ErrNotFound) {
				t.Errorf("Redrive(discarded) = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestDeadLetterWithoutTopic: a consumer called outside a Watermill router
// does not know the topic; its dead letter is re-driven only to a topic the
// operator names.
func TestDeadLetterWithoutTopic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := databases(t)["sqlite"](t)
	drv := driver(t, db)
	must(t, consumer.MigrateDeadLetters(ctx, drv, ""))
	dlq, err := consumer.NewDeadLetterTable(drv, "")
	must(t, err)
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DeadLetterPublisher: dlq})
	must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
		return runtime.Permanent(errors.New("refused"))
	}))
	msg := paidMessage(t, 2, "o-1", 1)
	if err := c.HandlerFunc()(msg); err != nil {
		t.Fatal(err)
	}
	list, err := dlq.List(ctx, sqlstore.DeadLetterQuery{})
	must(t, err)
	if len(list) != 1 || list[0].Topic != "" {
		t.Fatalf("dead letters = %+v: want one without a topic", list)
	}
	pub := &recordingPublisher{}
	if _, err := dlq.Redrive(ctx, pub, list[0].ID, ""); !errors.Is(err, consumer.ErrNoTopic) {
		t.Fatalf("Redrive without a topic = %v, want ErrNoTopic", err)
	}
	if _, err := dlq.Redrive(ctx, pub, list[0].ID, "payments"); err != nil {
		t.Fatal(err)
	}
	// With the dead-letter keys, as from a dead-letter topic: a broker
	// that deduplicates by event id takes it for a re-drive.
	got := pub.topic("payments")
	if len(got) != 1 || got[0].UUID != msg.UUID || got[0].Metadata.Get(runtime.MetadataEventType) != paidType ||
		got[0].Metadata.Get(consumer.MetadataDeadLetterAt) == "" || got[0].Metadata.Get(consumer.MetadataDeadLetterReason) != string(consumer.ReasonHandler) {
		t.Errorf("re-driven = %v", got)
	}
}

// TestDeadLetterLongErrorIsKept: an error text longer than the table's
// column would take is cut, not a failed write (a failed dead-lettering
// nacks the message, which fails again the same way for good).
func TestDeadLetterLongErrorIsKept(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			drv := driver(t, open(t))
			must(t, consumer.MigrateDeadLetters(ctx, drv, ""))
			dlq, err := consumer.NewDeadLetterTable(drv, "")
			must(t, err)
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DeadLetterPublisher: dlq})
			must(t, consumer.HandleWithoutInbox(c, func(context.Context, PaidV2, consumer.Meta) error {
				return runtime.Permanent(errors.New(strings.Repeat("é", 100<<10)))
			}))
			if err := c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)); err != nil {
				t.Fatalf("handler = %v: the dead letter was not written", err)
			}
			list, err := dlq.List(ctx, sqlstore.DeadLetterQuery{})
			must(t, err)
			if len(list) != 1 || len(list[0].Error) > sqlstore.MaxDeadLetterError || !utf8.ValidString(list[0].Error) {
				t.Fatalf("dead letters = %d, error of %d bytes", len(list), len(list[0].Error))
			}
		})
	}
}

// TestDeadLetterTableRefusesBadNames: a table name that is not a plain
// identifier is refused with ErrInvalidTable.
func TestDeadLetterTableRefusesBadNames(t *testing.T) {
	t.Parallel()
	drv := driver(t, databases(t)["sqlite"](t))
	if _, err := consumer.NewDeadLetterTable(drv, "dead letters; DROP TABLE x"); !errors.Is(err, consumer.ErrInvalidTable) {
		t.Errorf("NewDeadLetterTable(bad name) = %v, want ErrInvalidTable", err)
	}
	if _, err := consumer.NewDeadLetterTable(nil, ""); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("NewDeadLetterTable(nil) = %v, want ErrInvalidConfig", err)
	}
}
