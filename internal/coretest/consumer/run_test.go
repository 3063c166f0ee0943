package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/consumer"
)

// streamSubscriber is a PartitionSubscriber over fixed streams: each is
// delivered whole (as a subscriber with a deep window does), then closed,
// so Run returns ErrSubscriptionClosed once it has applied everything.
type streamSubscriber struct{ streams [][]*message.Message }

func (s streamSubscriber) SubscribePartitions(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error) {
	out := make(chan (<-chan *message.Message), len(s.streams))
	for _, msgs := range s.streams {
		ch := make(chan *message.Message, len(msgs))
		for _, m := range msgs {
			ch <- m
		}
		close(ch)
		out <- ch
	}
	close(out)
	return out, nil
}

// partitioned returns the events of aggregates orders, seqs 1..perOrder,
// spread over partitions by order (as Kafka keys them), each partition
// interleaving its orders.
func partitioned(t *testing.T, partitions, orders, perOrder int) [][]*message.Message {
	t.Helper()
	streams := make([][]*message.Message, partitions)
	for seq := 1; seq <= perOrder; seq++ {
		for o := range orders {
			streams[o%partitions] = append(streams[o%partitions], paidMessage(t, 1+seq%2, orderName(o), seq))
		}
	}
	return streams
}

// checkOrder fails the test unless effects hold every order's seqs
// 1..perOrder once each, in that order (by effect id: insertion order).
func checkOrder(t *testing.T, got []Effect, orders, perOrder int) {
	t.Helper()
	seqs := map[string][]int{}
	for _, e := range got {
		seqs[e.OrderID] = append(seqs[e.OrderID], e.Seq)
	}
	want := make([]int, perOrder)
	for i := range want {
		want[i] = i + 1
	}
	for o := range orders {
		if diff := cmp.Diff(want, seqs[orderName(o)]); diff != "" {
			t.Errorf("%s: effects' seqs in the order applied (-want +got):\n%s", orderName(o), diff)
		}
	}
	if len(got) != orders*perOrder {
		t.Errorf("effects = %d, want %d", len(got), orders*perOrder)
	}
}

// acked reports how many of msgs were acked, and fails on a nack.
func acked(t *testing.T, streams [][]*message.Message) int {
	t.Helper()
	n := 0
	for _, s := range streams {
		for _, m := range s {
			select {
			case <-m.Nacked():
				t.Errorf("message %s nacked: Run never nacks", m.UUID)
			case <-m.Acked():
				n++
			default:
			}
		}
	}
	return n
}

// TestRunBatchesAppliesOnceInOrder: Run applies three partitions in
// parallel, ten messages per transaction, with duplicates inside batches
// (an event already applied before Run, and an event repeated within its
// stream, as a redelivery after a rebalance puts it): every event is
// applied once, each aggregate's events in their order, every message is
// acked, and the duplicates are reported as such.
func TestRunBatchesAppliesOnceInOrder(t *testing.T) {
	t.Parallel()
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			db := d.gorm
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, BatchSize: 10, OnOutcome: o.record})
			must(t, d.handle(c, nil))

			const orders, perOrder = 6, 12
			streams := partitioned(t, 3, orders, perOrder)
			// The first event of stream 0 was applied before Run.
			must(t, c.HandlerFunc()(redeliver(streams[0][0])))
			// Stream 1 repeats its 3rd and 4th messages right after
			// them, and again at the end.
			s := streams[1]
			streams[1] = append(append(slices.Clone(s[:4]), redeliver(s[2]), redeliver(s[3])), s[4:]...)
			streams[1] = append(streams[1], redeliver(s[2]))
			total := 0
			for _, s := range streams {
				total += len(s)
			}

			if err := c.Run(context.Background(), streamSubscriber{streams}, "orders"); !errors.Is(err, consumer.ErrSubscriptionClosed) {
				t.Fatalf("Run = %v, want ErrSubscriptionClosed", err)
			}
			checkOrder(t, effects(t, db), orders, perOrder)
			if n := acked(t, streams); n != total {
				t.Errorf("acked %d of %d messages", n, total)
			}
			counts := o.counts()
			if diff := cmp.Diff(map[string]int{"applied": orders * perOrder, "duplicate": 1 + 3}, counts); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			batched := 0
			for _, r := range o.results {
				if r.Batch > 1 {
					batched++
				}
			}
			if batched < total-10 {
				t.Errorf("%d of %d messages applied in batches, want nearly all", batched, total)
			}
			if n := count(t, db, consumer.DefaultTable); n != orders*perOrder {
				t.Errorf("inbox entries = %d, want %d", n, orders*perOrder)
			}
		})
	}
}

// TestRunHandlerFailsMidBatch: a handler error in the middle of a batch
// rolls the whole batch back, and Run applies its messages one at a time:
// the event that failed once is applied on its retry, the event that always
// fails is dead-lettered, and every other event of the batch is applied
// exactly once (none lost with the rollback, none applied twice), in order.
func TestRunHandlerFailsMidBatch(t *testing.T) {
	t.Parallel()
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			db := d.gorm
			var o outcomes
			dlq := &recordingPublisher{}
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, BatchSize: 8, OnOutcome: o.record,
				DeadLetterPublisher: dlq, MaxRetries: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
			const orders, perOrder = 4, 6
			streams := partitioned(t, 2, orders, perOrder)
			flaky, poison := streams[0][3].UUID, streams[1][5].UUID
			var flakyRuns atomic.Int32
			must(t, d.handle(c, func(_ context.Context, _ PaidV2, m consumer.Meta) error {
				switch m.EventID.String() {
				case flaky:
					if flakyRuns.Add(1) == 1 {
						return errBoom // after its write: rolled back
					}
				case poison:
					return fmt.Errorf("poison: %w", errBoom)
				}
				return nil
			}))

			if err := c.Run(context.Background(), streamSubscriber{streams}, "orders"); !errors.Is(err, consumer.ErrSubscriptionClosed) {
				t.Fatalf("Run = %v, want ErrSubscriptionClosed", err)
			}
			got := effects(t, db)
			var seqs = map[string][]int{}
			ids := map[string]int{}
			for _, e := range got {
				seqs[e.OrderID] = append(seqs[e.OrderID], e.Seq)
				ids[e.EventID]++
			}
			for id, n := range ids {
				if n != 1 {
					t.Errorf("event %s applied %d times", id, n)
				}
			}
			// Stream 1's 6th message is order 3's (odd orders go to
			// stream 1; it interleaves orders 1 and 3) 3rd event.
			for o := range orders {
				want := []int{1, 2, 3, 4, 5, 6}
				if o == 3 {
					want = []int{1, 2, 4, 5, 6}
				}
				if diff := cmp.Diff(want, seqs[orderName(o)]); diff != "" {
					t.Errorf("%s: seqs applied (-want +got):\n%s", orderName(o), diff)
				}
			}
			if dl := dlq.topic("c.dlq"); len(dl) != 1 || dl[0].UUID != poison {
				t.Errorf("dead-lettered %d messages, want the poison one", len(dl))
			}
			if diff := cmp.Diff(map[string]int{"applied": orders*perOrder - 1, "dead_lettered": 1}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if n := acked(t, streams); n != orders*perOrder {
				t.Errorf("acked %d of %d", n, orders*perOrder)
			}
		})
	}
}

// TestRunRetriesWhatItWouldNack: a delivery that ends nacked with a
// router (here the inbox transaction fails while the database refuses it)
// is tried again in place by Run, holding back only its own partition, and
// is acked once applied.
func TestRunRetriesWhatItWouldNack(t *testing.T) {
	t.Parallel()
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv, BatchSize: 5, OnOutcome: o.record,
		MaxRetries: -1, NackDelay: time.Millisecond, MaxNackDelay: time.Millisecond})
	streams := partitioned(t, 2, 2, 5)
	stuck := streams[0][2].UUID
	var failures atomic.Int32
	write := writeEffect("c")
	must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		if m.EventID.String() == stuck && failures.Add(1) <= 3 {
			// A statement error the handler returns: with no dead-letter
			// publisher, the message fails (router: nack).
			return errors.New("database said no")
		}
		return write(ctx, tx, e, m)
	}))
	if err := c.Run(context.Background(), streamSubscriber{streams}, "orders"); !errors.Is(err, consumer.ErrSubscriptionClosed) {
		t.Fatalf("Run = %v", err)
	}
	checkOrder(t, effects(t, db), 2, 5)
	if n := acked(t, streams); n != 10 {
		t.Errorf("acked %d of 10", n)
	}
	if got := o.counts()["failed"]; got < 2 {
		t.Errorf("failed deliveries = %d, want the stuck message's (the batch's try rolls back silently)", got)
	}
}

// TestRunStopsOnCancel: Run returns nil when ctx is done, leaving what it
// did not apply unacked.
func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv})
	must(t, consumer.Handle(c, drv, writeEffect("c")))
	ctx, cancel := context.WithCancel(context.Background())
	streams := make(chan (<-chan *message.Message))
	sub := subscribeFunc(func(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error) {
		return streams, nil
	})
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, sub, "orders") }()
	stream := make(chan *message.Message, 1)
	msg := paidMessage(t, 2, "o-1", 1)
	stream <- msg
	streams <- stream
	select {
	case <-msg.Acked():
	case <-time.After(30 * time.Second):
		t.Fatal("not acked within 30s")
	}
	cancel()
	close(streams)
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	if _, err := consumer.New(newRegistry(t, 2), consumer.Config{Name: "c", BatchSize: consumer.MaxBatchSize + 1}); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("BatchSize above MaxBatchSize: %v, want ErrInvalidConfig", err)
	}
}

type subscribeFunc func(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error)

func (f subscribeFunc) SubscribePartitions(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error) {
	return f(ctx, topic)
}
