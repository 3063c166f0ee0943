package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// Effect is the row the consumer section's handler writes per event.
type Effect struct {
	ID       int64 `gorm:"primaryKey"`
	Consumer string
	EventID  string
	Amount   int64
}

// consumeTopic is the consumer section's topic; each run of the section
// (once per load mode) has its own, "bench.consume.<n>", and its consumers
// their own names, so that a second run neither reads the first one's
// events nor counts its rows.
const consumeTopic = "bench.consume"

const (
	consumeInbox         = "router, with the inbox (Handle)"
	consumeNoInbox       = "router, without the inbox (HandleWithoutInbox)"
	consumeGroupedInbox  = "router, with the inbox, Config.MaxTransactions 2"
	consumeSerialInbox   = "router, SerialPartitions, with the inbox"
	consumeSerialNoInbox = "router, SerialPartitions, without the inbox"
	consumeRunInbox      = "Run, batches of 100, partitions in parallel, with the inbox"
	consumeRunNoInbox    = "Run, partitions in parallel, without the inbox"
	consumeRunBatchSize  = 100
)

// consumeMode is how the consumer section reads the topic.
type consumeMode int

const (
	// consumeRouter is a Watermill router on the subscriber's defaults:
	// one message at a time per partition, the partitions' messages
	// handled concurrently.
	consumeRouter consumeMode = iota
	// consumeRouterSerial is a Watermill router on a subscription with
	// SubscriberConfig.SerialPartitions: one message at a time across the
	// partitions.
	consumeRouterSerial
	// consumeRun is Consumer.Run over SubscribePartitions.
	consumeRun
	// consumeRouterGrouped is consumeRouter with Config.MaxTransactions
	// consumeMaxTransactions.
	consumeRouterGrouped
)

// consumeMaxTransactions is Config.MaxTransactions of consumeRouterGrouped:
// the CPUs of this machine the benchmark was tuned on.
const consumeMaxTransactions = 2

// consumerSection is section 4: runtime/consumer reading from kfake.
func (b *bench) consumerSection(ctx context.Context) error {
	o := b.o
	drv, err := hooks.NewDriver(b.plain)
	if err != nil {
		return err
	}
	if err := consumer.Migrate(ctx, drv, ""); err != nil {
		return err
	}
	if err := b.plain.AutoMigrate(&Effect{}); err != nil {
		return err
	}
	b.consumeRuns++
	topic := fmt.Sprintf("%s.%d", consumeTopic, b.consumeRuns)
	if err := b.fillConsumeTopic(ctx, topic, o.consumerEvents); err != nil {
		return err
	}
	reg := runtime.NewRegistry()
	if err := Register(reg); err != nil {
		return err
	}
	res := newResults()
	for rep := range o.reps {
		for _, run := range []struct {
			label string
			inbox bool
			mode  consumeMode
		}{
			{consumeInbox, true, consumeRouter}, {consumeNoInbox, false, consumeRouter}, {consumeGroupedInbox, true, consumeRouterGrouped},
			{consumeSerialInbox, true, consumeRouterSerial}, {consumeSerialNoInbox, false, consumeRouterSerial},
			{consumeRunInbox, true, consumeRun}, {consumeRunNoInbox, false, consumeRun},
		} {
			b.progress("consumer rep %d: %s", rep+1, run.label)
			name := fmt.Sprintf("relaybench-%d-%v-%v-%d", b.consumeRuns, run.inbox, run.mode, rep)
			rate, err := b.runConsumer(ctx, reg, topic, name, run.inbox, run.mode)
			if err != nil {
				return fmt.Errorf("%s: %w", run.label, err)
			}
			res.add(run.label, rate)
		}
	}
	fmt.Fprintf(b.out, "\n### 4. Consumer: runtime/consumer, %s events from kfake (8 partitions, one subscription), the handler writes one row\n\n",
		groupDigits(float64(o.consumerEvents)))
	fmt.Fprintln(b.out, "The router rows run Consumer.HandlerFunc in a Watermill router: on the Kafka subscriber's defaults (one message")
	fmt.Fprintln(b.out, "at a time per partition, the router handling the partitions concurrently, acks committed in the background), and")
	fmt.Fprintln(b.out, "with kafka.SubscriberConfig.SerialPartitions (one message at a time across the partitions, each ack committed")
	fmt.Fprintln(b.out, "before the next message), and with consumer.Config.MaxTransactions 2 (the deliveries that come while two inbox")
	fmt.Fprintln(b.out, "transactions run are applied together in the next); the Run rows run Consumer.Run over SubscribePartitions (a goroutine per partition;")
	fmt.Fprintln(b.out, "with the inbox, up to 100 consecutive messages of a partition per transaction; without it, each row commits alone).")
	fmt.Fprintln(b.out)
	res.table(b.out, "events/s", groupDigits)
	fmt.Fprintln(b.out)
	res.ratios(b.out, []ratio{
		{"router: with / without the inbox", consumeInbox, consumeNoInbox},
		{"router, MaxTransactions 2: with / without the inbox", consumeGroupedInbox, consumeNoInbox},
		{"router, SerialPartitions: with / without the inbox", consumeSerialInbox, consumeSerialNoInbox},
		{"router with the inbox: defaults / SerialPartitions", consumeInbox, consumeSerialInbox},
		{"Run: with / without the inbox", consumeRunInbox, consumeRunNoInbox},
		{"Run with the inbox / router with the inbox", consumeRunInbox, consumeInbox},
	})
	return nil
}

// fillConsumeTopic creates the consumer section's topic and publishes n
// events to it, as the relay would have.
func (b *bench) fillConsumeTopic(ctx context.Context, topic string, n int) error {
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: b.brokers, ConsumerGroup: "relaybench-init", TopicPartitions: 8})
	if err != nil {
		return err
	}
	err = sub.SubscribeInitialize(topic)
	sub.Close()
	if err != nil {
		return err
	}
	pub, err := b.publisher("consumer")
	if err != nil {
		return err
	}
	for start := 0; start < n; start += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			m, err := b.wmMessage(ctx, b.ev.event(i), fmt.Sprint(i%b.o.aggregates))
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
		// kafka-go caches topic metadata for a few seconds, so a topic just
		// created may be unknown to the writer at first.
		if err := waitFor(30*time.Second, func() bool { return pub.Publish(topic, msgs...) == nil }); err != nil {
			return fmt.Errorf("publish to %s: %w", topic, err)
		}
	}
	return nil
}

// runConsumer consumes the topic with a new consumer group and returns
// events/s from the first event handled to the last.
// mode says how it reads (see consumeMode).
func (b *bench) runConsumer(ctx context.Context, reg *runtime.Registry, topic, name string, inbox bool, mode consumeMode) (float64, error) {
	n := b.o.consumerEvents
	var handled, failed atomic.Int64
	var first, last time.Time
	var mu sync.Mutex
	done := make(chan struct{})
	drv, err := hooks.NewDriver(b.plain)
	if err != nil {
		return 0, err
	}
	maxTx := 0
	if mode == consumeRouterGrouped {
		maxTx = consumeMaxTransactions
	}
	c, err := consumer.New(reg, consumer.Config{Name: name, DB: drv, Logger: quietLogger(), BatchSize: consumeRunBatchSize, MaxTransactions: maxTx, OnOutcome: func(r consumer.Result) {
		if r.Outcome != consumer.OutcomeApplied {
			failed.Add(1)
			return
		}
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		last = time.Now()
		mu.Unlock()
		if handled.Add(1) == int64(n) {
			close(done)
		}
	}})
	if err != nil {
		return 0, err
	}
	write := func(ctx context.Context, tx *gorm.DB, e Paid, m consumer.Meta) error {
		return tx.WithContext(ctx).Create(&Effect{Consumer: name, EventID: m.EventID.String(), Amount: e.Amount}).Error
	}
	if inbox {
		err = consumer.Handle(c, drv, write)
	} else {
		err = consumer.HandleWithoutInbox(c, func(ctx context.Context, e Paid, m consumer.Meta) error {
			return write(ctx, b.plain, e, m)
		})
	}
	if err != nil {
		return 0, err
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: b.brokers, ConsumerGroup: name,
		SerialPartitions: mode == consumeRouterSerial})
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	errc := make(chan error, 1)
	var stop func() error
	if mode == consumeRun {
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { errc <- c.Run(runCtx, sub, topic) }()
		stop = func() error { cancel(); return nil }
	} else {
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			return 0, err
		}
		router.AddConsumerHandler(name, topic, sub, c.HandlerFunc())
		go func() { errc <- router.Run(ctx) }()
		stop = router.Close
	}
	select {
	case <-done:
	case err := <-errc:
		return 0, fmt.Errorf("consumer stopped: %w", err)
	case <-time.After(10 * time.Minute):
		_ = stop()
		<-errc
		return 0, fmt.Errorf("%d of %d events handled in 10 minutes", handled.Load(), n)
	}
	if err := stop(); err != nil {
		return 0, err
	}
	if err := <-errc; err != nil {
		return 0, err
	}
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("%d deliveries were not applied", f)
	}
	var rows int64
	if err := b.plain.Model(&Effect{}).Where("consumer = ?", name).Count(&rows).Error; err != nil {
		return 0, err
	}
	if rows != int64(n) {
		return 0, fmt.Errorf("the handler wrote %d rows for %d events", rows, n)
	}
	mu.Lock()
	defer mu.Unlock()
	return float64(n-1) / max(last.Sub(first), time.Microsecond).Seconds(), nil
}
