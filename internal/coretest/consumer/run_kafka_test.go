package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// publishInOrder publishes seqs 1..perOrder of orders, one seq at a time,
// so each order's events reach its partition in seq order, and returns
// them.
func (b *broker) publishInOrder(t *testing.T, orders, perOrder int) [][]*message.Message {
	t.Helper()
	pub := b.publisher(t)
	all := make([][]*message.Message, perOrder)
	for seq := 1; seq <= perOrder; seq++ {
		batch := make([]*message.Message, orders)
		for o := range orders {
			batch[o] = paidMessage(t, 1+seq%2, orderName(o), seq)
		}
		deadline := time.Now().Add(30 * time.Second)
		for err := pub.Publish(b.topic, batch...); err != nil; err = pub.Publish(b.topic, batch...) {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // kafka-go's metadata of a new topic lags
		}
		all[seq-1] = batch
	}
	return all
}

// waitEffects polls until db holds n effects, failing after a minute.
func waitEffects(t *testing.T, db *gorm.DB, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := len(effects(t, db))
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("effects = %d after a minute, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond) // polling the database
	}
}

// runInBackground runs c.Run on sub until the returned stop is called, and
// fails the test when Run returns anything but nil.
func runInBackground(t *testing.T, c *consumer.Consumer, sub consumer.PartitionSubscriber, topic string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, sub, topic) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestKafkaRunPartitionsInParallelKeepOrder: Run over kafka-go and kfake,
// four partitions, batches of up to 50, and a second member joining while
// the first is in the middle of its work (it holds its batches until the
// second has partitions): the partitions that move are read by both for a
// while (the first finishes what it had fetched, the second starts over
// from the last commit). Every event is applied once and each aggregate's
// events in their order.
func TestKafkaRunPartitionsInParallelKeepOrder(t *testing.T) {
	t.Parallel()
	b := newBroker(t, 4)
	db := prepare(t, hookstest.Postgres(t, nil))
	drv := driver(t, db)
	const orders, perOrder = 40, 25
	b.publishInOrder(t, orders, perOrder)

	var batched atomic.Int64
	cfg := consumer.Config{Name: "billing", DB: drv, BatchSize: 50, OnOutcome: func(r consumer.Result) {
		if r.Batch > 1 {
			batched.Add(1)
		}
	}}
	write := writeEffect("billing")
	second := &notifySubscriber{PartitionSubscriber: b.subscriber(t, "billing"), assigned: make(chan struct{})}
	// Member A holds every event from seq 12 on until member B has
	// partitions of its own: each partition has 10 orders, so a batch
	// (at most 50) spans at most 5 seqs, and A commits at least seqs 1 to
	// 6 of every order before it holds.
	a := newConsumer(t, newRegistry(t, 2), cfg)
	must(t, consumer.Handle(a, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		if e.Seq >= 12 {
			select {
			case <-second.assigned:
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Second):
				t.Error("the second member got no partition within 20s")
			}
		}
		return write(ctx, tx, e, m)
	}))
	bc := newConsumer(t, newRegistry(t, 2), cfg)
	must(t, consumer.Handle(bc, drv, write))

	stopA := runInBackground(t, a, b.subscriber(t, "billing"), b.topic)
	waitEffects(t, db, orders*6)
	stopB := runInBackground(t, bc, second, b.topic)
	waitEffects(t, db, orders*perOrder)
	stopA()
	stopB()

	checkOrder(t, effects(t, db), orders, perOrder)
	if batched.Load() == 0 {
		t.Error("no message was applied in a batch")
	}
}

// notifySubscriber closes assigned when its first partition stream comes.
type notifySubscriber struct {
	consumer.PartitionSubscriber
	once     sync.Once
	assigned chan struct{}
}

func (n *notifySubscriber) SubscribePartitions(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error) {
	streams, err := n.PartitionSubscriber.SubscribePartitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan (<-chan *message.Message))
	go func() {
		defer close(out)
		for s := range streams {
			n.once.Do(func() { close(n.assigned) })
			out <- s
		}
	}()
	return out, nil
}

// TestKafkaRunCrashMidBatch: a member applies some events and crashes
// (committed, not acked), then crashes in the middle of a batch (rolled
// back, not acked); the next member gets everything since the last commit
// again and applies each event once, in order, the committed ones as
// duplicates.
func TestKafkaRunCrashMidBatch(t *testing.T) {
	t.Parallel()
	b := newBroker(t, 2)
	db := prepare(t, hookstest.Postgres(t, nil))
	drv := driver(t, db)
	const orders, perOrder = 10, 20
	sent := b.publishInOrder(t, orders, perOrder)

	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, BatchSize: 20, OnOutcome: o.record})
	var crash atomic.Pointer[context.CancelFunc]
	crashAt := sent[9][3].UUID // order-3's 10th event
	write := writeEffect("billing")
	must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		if err := write(ctx, tx, e, m); err != nil {
			return err
		}
		if m.EventID.String() == crashAt {
			if cancel := crash.Swap(nil); cancel != nil {
				(*cancel)() // the process dies here: nothing after commits
				return errors.New("killed")
			}
		}
		return nil
	}))
	// The first two events of every order were applied by a member that
	// died before acking them.
	for _, batch := range sent[:2] {
		for _, msg := range batch {
			must(t, c.HandlerFunc()(redeliver(msg)))
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	crash.Store(&cancel)
	if err := c.Run(ctx, b.subscriber(t, "billing"), b.topic); err != nil {
		t.Fatalf("first Run = %v", err)
	}
	if got := len(effects(t, db)); got >= orders*perOrder {
		t.Fatalf("effects after the crash = %d: the crash came too late to test anything", got)
	}

	stop := runInBackground(t, c, b.subscriber(t, "billing"), b.topic)
	waitEffects(t, db, orders*perOrder)
	stop()
	checkOrder(t, effects(t, db), orders, perOrder)
	if n := o.counts()["duplicate"]; n < 2*orders {
		t.Errorf("duplicates = %d, want at least the %d events applied before the first Run", n, 2*orders)
	}
}
