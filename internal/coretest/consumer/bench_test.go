package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// BenchmarkConsumerPostgres measures events/s through a consumer whose
// handler writes one row on PostgreSQL, with the inbox (marker and row in
// one transaction) and without it (the row alone, in GORM's default
// transaction), delivering from 1 goroutine (one partition) and from 4 (four
// partitions). No broker is involved: the messages are handed to the handler
// function directly, so the figures are the consumer's own cost.
//
//	go test -run '^$' -bench ConsumerPostgres -benchtime 5000x ./internal/coretest/consumer/
func BenchmarkConsumerPostgres(b *testing.B) {
	db := prepare(b, hookstest.Postgres(b, nil))
	drv := driver(b, db)
	for _, partitions := range []int{1, 4} {
		for _, inbox := range []bool{true, false} {
			name := fmt.Sprintf("inbox=%v/partitions=%d", inbox, partitions)
			b.Run(name, func(b *testing.B) {
				c := newConsumer(b, newRegistry(b, 2), consumer.Config{Name: name, DB: drv})
				write := writeEffect(name)
				if inbox {
					must(b, consumer.Handle(c, drv, write))
				} else {
					must(b, consumer.HandleWithoutInbox(c, func(ctx context.Context, e PaidV2, m consumer.Meta) error {
						return write(ctx, db.WithContext(ctx), e, m)
					}))
				}
				h := c.HandlerFunc()
				msgs := make([]*message.Message, b.N)
				for i := range msgs {
					msgs[i] = paidMessage(b, 1+i%2, orderName(i%100), i)
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				for p := range partitions {
					wg.Go(func() {
						for i := p; i < len(msgs); i += partitions {
							if err := h(msgs[i]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				var n int64
				must(b, db.Model(&Effect{}).Where("consumer = ?", name).Count(&n).Error)
				if n < int64(b.N) || (inbox && n != int64(b.N)) {
					b.Fatalf("effects = %d, want %d", n, b.N)
				}
				must(b, db.Where("consumer = ?", name).Delete(&Effect{}).Error)
				must(b, db.Exec(`DELETE FROM `+consumer.DefaultTable+` WHERE consumer = ?`, name).Error)
			})
		}
	}
}

// BenchmarkConsumerKafkaPostgres measures events/s through the whole
// consuming side: kfake (8 partitions) → adapters/kafka subscriber →
// consumer, with the handler writing one row on PostgreSQL, with the inbox
// (Handle: marker and row in one transaction) and without it
// (HandleWithoutInbox: the row alone, in GORM's default transaction), in
// four ways:
//
//   - router/members=1: a Watermill router and [consumer.Consumer.HandlerFunc]
//     with one subscription with SerialPartitions, which delivers one
//     message at a time across its partitions and commits each offset (the
//     consumer as it was);
//   - router/members=4: the same with four subscriptions (group members);
//   - router/parallel: one subscription with the subscriber's defaults, one
//     message at a time per partition, the router running them at once;
//   - run/batch=100: [consumer.Consumer.Run] over SubscribePartitions, the
//     partitions in parallel and up to 100 messages of a partition per
//     transaction (the inbox's markers in one statement, one commit, one
//     offset commit per run of acks). Without the inbox there is no
//     transaction to share: each row commits alone, partitions in
//     parallel.
//
// The messages are published before the timer starts. Compare ratios
// within one run: the machine is shared.
//
//	go test -run '^$' -bench ConsumerKafkaPostgres -benchtime 20000x ./internal/coretest/consumer/
func BenchmarkConsumerKafkaPostgres(b *testing.B) {
	db := prepare(b, hookstest.Postgres(b, nil))
	drv := driver(b, db)
	brk := &broker{addrs: kafkatest.NewCluster(b)}
	for _, mode := range []string{"router/members=1", "router/members=4", "router/parallel", "run/batch=100"} {
		for _, inbox := range []bool{true, false} {
			name := fmt.Sprintf("inbox=%v/%s", inbox, mode)
			b.Run(name, func(b *testing.B) {
				topic := fmt.Sprintf("bench-%d", rand.Int64())
				brk.createTopic(b, topic, 8)
				pub := brk.publisher(b)
				for start := 0; start < b.N; start += 1000 {
					batch := make([]*message.Message, 0, 1000)
					for i := start; i < min(start+1000, b.N); i++ {
						batch = append(batch, paidMessage(b, 1+i%2, orderName(i%100), i))
					}
					// kafka-go caches topic metadata for a few seconds, so
					// a topic just created may be unknown to it at first.
					deadline := time.Now().Add(30 * time.Second)
					for err := pub.Publish(topic, batch...); err != nil; err = pub.Publish(topic, batch...) {
						if time.Now().After(deadline) {
							b.Fatal(err)
						}
						time.Sleep(100 * time.Millisecond) // waiting for a metadata refresh
					}
				}
				var handled atomic.Int64
				done := make(chan struct{})
				// Count applications: members joining redeliver what was
				// not committed yet (duplicates with the inbox, applied
				// again without it).
				c := newConsumer(b, newRegistry(b, 2), consumer.Config{Name: name, DB: drv, BatchSize: 100, OnOutcome: func(r consumer.Result) {
					if r.Outcome == consumer.OutcomeApplied && handled.Add(1) == int64(b.N) {
						close(done)
					}
				}})
				write := writeEffect(name)
				if inbox {
					must(b, consumer.Handle(c, drv, write))
				} else {
					must(b, consumer.HandleWithoutInbox(c, func(ctx context.Context, e PaidV2, m consumer.Meta) error {
						return write(ctx, db.WithContext(ctx), e, m)
					}))
				}
				var tune []func(*kafka.SubscriberConfig)
				if strings.HasPrefix(mode, "router/members") {
					tune = append(tune, func(c *kafka.SubscriberConfig) { c.SerialPartitions = true })
				}
				sub := brk.subscriber(b, name, tune...)
				var stop func()
				if mode == "run/batch=100" {
					ctx, cancel := context.WithCancel(context.Background())
					ran := make(chan error, 1)
					b.ResetTimer()
					go func() { ran <- c.Run(ctx, sub, topic) }()
					stop = func() {
						cancel()
						must(b, <-ran)
					}
				} else {
					router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
					must(b, err)
					members := 1
					if mode == "router/members=4" {
						members = 4
					}
					for i := range members {
						router.AddConsumerHandler(fmt.Sprintf("%s-%d", name, i), topic, sub, c.HandlerFunc())
					}
					b.ResetTimer()
					go router.Run(context.Background())
					stop = func() { must(b, router.Close()) }
				}
				select {
				case <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("handled %d of %d messages in 5 minutes", handled.Load(), b.N)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				stop()
				var n int64
				must(b, db.Model(&Effect{}).Where("consumer = ?", name).Count(&n).Error)
				if n < int64(b.N) || (inbox && n != int64(b.N)) {
					b.Fatalf("effects = %d, want %d", n, b.N)
				}
				must(b, db.Where("consumer = ?", name).Delete(&Effect{}).Error)
				must(b, db.Exec(`DELETE FROM `+consumer.DefaultTable+` WHERE consumer = ?`, name).Error)
			})
		}
	}
}
