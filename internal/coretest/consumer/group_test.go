package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime/consumer"
)

// waitsMsg is the DEBUG line of a delivery that waits for an inbox
// transaction (Config.MaxTransactions).
const waitsMsg = "consumer: delivery waits for an inbox transaction"

// gated runs msgs through c.HandlerFunc concurrently, as a router does with
// partitions in parallel, while gate's delivery holds the consumer's one
// transaction: it delivers gate, waits until its handler runs (started),
// delivers msgs, waits until rec has logged that each of them waits, then
// lets gate's handler return (release), and returns each delivery's error.
func gated(t *testing.T, c *consumer.Consumer, rec *recordHandler, gate *message.Message, started <-chan struct{}, release chan<- struct{}, msgs []*message.Message) []error {
	t.Helper()
	errs := make([]error, len(msgs)+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = c.HandlerFunc()(gate) }()
	<-started
	for i, m := range msgs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i+1] = c.HandlerFunc()(m) }()
	}
	for deadline := time.Now().Add(10 * time.Second); rec.count(waitsMsg) < len(msgs); {
		if time.Now().After(deadline) {
			close(release)
			wg.Wait()
			t.Fatalf("%d of %d deliveries waiting after 10s", rec.count(waitsMsg), len(msgs))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	return errs
}

// count returns how many records rec holds with message msg.
func (h *recordHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range *h.records {
		if r.Msg == msg {
			n++
		}
	}
	return n
}

// TestHandlerFuncGroupsWaitingDeliveries: with MaxTransactions 1, the
// deliveries a router hands the consumer while its transaction runs wait,
// and are applied together, BatchSize at most per transaction: every event
// once, a redelivery of an event applied before reported as a duplicate,
// every delivery acked.
func TestHandlerFuncGroupsWaitingDeliveries(t *testing.T) {
	t.Parallel()
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			rec := newRecordHandler()
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, MaxTransactions: 1, BatchSize: 5,
				OnOutcome: o.record, Logger: slog.New(rec)})
			gate := paidMessage(t, 2, "gate", 1)
			started, release := make(chan struct{}), make(chan struct{})
			must(t, d.handle(c, func(_ context.Context, _ PaidV2, m consumer.Meta) error {
				if m.EventID.String() == gate.UUID {
					close(started)
					<-release
				}
				return nil
			}))
			before := paidMessage(t, 2, orderName(99), 1)
			must(t, c.HandlerFunc()(before))
			msgs := []*message.Message{redeliver(before)}
			for i := range 11 {
				msgs = append(msgs, paidMessage(t, 2, orderName(i), 1))
			}
			for i, err := range gated(t, c, rec, gate, started, release, msgs) {
				if err != nil {
					t.Errorf("delivery %d: %v", i, err)
				}
			}
			ids := map[string]int{}
			for _, e := range effects(t, d.gorm) {
				ids[e.EventID]++
			}
			if len(ids) != 13 {
				t.Errorf("%d events applied, want 13", len(ids))
			}
			for id, n := range ids {
				if n != 1 {
					t.Errorf("event %s applied %d times", id, n)
				}
			}
			if diff := cmp.Diff(map[string]int{"applied": 13, "duplicate": 1}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			for _, r := range o.results[2:] { // those that waited
				if r.Batch < 2 || r.Batch > 5 {
					t.Errorf("%s applied in a transaction of %d, want 2 to 5", r.MessageUUID, r.Batch)
				}
			}
			if n := count(t, d.gorm, consumer.DefaultTable); n != 13 {
				t.Errorf("inbox entries = %d, want 13", n)
			}
		})
	}
}

// TestHandlerFuncGroupRolledBackAppliesAlone: a handler error in a group
// rolls back its transaction, and each of its deliveries is applied in a
// transaction of its own, as without MaxTransactions: the event that
// failed once is applied on its retry, the one that always fails is
// dead-lettered, every other is applied once.
func TestHandlerFuncGroupRolledBackAppliesAlone(t *testing.T) {
	t.Parallel()
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			rec := newRecordHandler()
			var o outcomes
			dlq := &recordingPublisher{}
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, MaxTransactions: 1, OnOutcome: o.record,
				Logger: slog.New(rec), DeadLetterPublisher: dlq, MaxRetries: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
			gate := paidMessage(t, 2, "gate", 1)
			var msgs []*message.Message
			for i := range 6 {
				msgs = append(msgs, paidMessage(t, 2, orderName(i), 1))
			}
			flaky, poison := msgs[2].UUID, msgs[4].UUID
			var flakyRuns atomic.Int32
			started, release := make(chan struct{}), make(chan struct{})
			must(t, d.handle(c, func(_ context.Context, _ PaidV2, m consumer.Meta) error {
				switch m.EventID.String() {
				case gate.UUID:
					close(started)
					<-release
				case flaky:
					if flakyRuns.Add(1) == 1 {
						return errBoom // after its write: rolled back
					}
				case poison:
					return fmt.Errorf("poison: %w", errBoom)
				}
				return nil
			}))
			for i, err := range gated(t, c, rec, gate, started, release, msgs) {
				if err != nil {
					t.Errorf("delivery %d: %v", i, err)
				}
			}
			ids := map[string]int{}
			for _, e := range effects(t, d.gorm) {
				ids[e.EventID]++
			}
			for _, m := range append([]*message.Message{gate}, msgs...) {
				want := 1
				if m.UUID == poison {
					want = 0
				}
				if ids[m.UUID] != want {
					t.Errorf("event %s applied %d times, want %d", m.UUID, ids[m.UUID], want)
				}
			}
			if dl := dlq.topic("c.dlq"); len(dl) != 1 || dl[0].UUID != poison {
				t.Errorf("dead-lettered %d messages, want the poison one", len(dl))
			}
			if diff := cmp.Diff(map[string]int{"applied": 6, "dead_lettered": 1}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandlerFuncWaitingDeliveryCanceled: a delivery whose context ends
// while it waits for a transaction leaves the queue at once (nacked, as a
// canceled delivery is), and the others go on.
func TestHandlerFuncWaitingDeliveryCanceled(t *testing.T) {
	t.Parallel()
	d := drivers(t)["gorm/sqlite"](t)
	rec := newRecordHandler()
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, MaxTransactions: 1, OnOutcome: o.record,
		Logger: slog.New(rec), NackDelay: time.Millisecond})
	gate := paidMessage(t, 2, "gate", 1)
	started, release := make(chan struct{}), make(chan struct{})
	must(t, d.handle(c, func(_ context.Context, _ PaidV2, m consumer.Meta) error {
		if m.EventID.String() == gate.UUID {
			close(started)
			<-release
		}
		return nil
	}))
	gateErr := make(chan error, 1)
	go func() { gateErr <- c.HandlerFunc()(gate) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	waiter := paidMessage(t, 2, orderName(1), 1)
	waiter.SetContext(ctx)
	waiterErr := make(chan error, 1)
	go func() { waiterErr <- c.HandlerFunc()(waiter) }()
	for deadline := time.Now().Add(10 * time.Second); rec.count(waitsMsg) < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the delivery is not waiting after 10s")
		}
	}
	cancel()
	if err := <-waiterErr; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled waiting delivery: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-gateErr; err != nil {
		t.Errorf("gate: %v", err)
	}
	if n := len(effects(t, d.gorm)); n != 1 {
		t.Errorf("%d events applied, want the gate's alone", n)
	}
}
