package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/ThreeDotsLabs/watermill/message"

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
//	go test -run '^$' -bench ConsumerPostgres -benchtime 5000x ./runtime/consumer
func BenchmarkConsumerPostgres(b *testing.B) {
	db := prepare(b, hookstest.Postgres(b, nil))
	for _, partitions := range []int{1, 4} {
		for _, inbox := range []bool{true, false} {
			name := fmt.Sprintf("inbox=%v/partitions=%d", inbox, partitions)
			b.Run(name, func(b *testing.B) {
				c := newConsumer(b, newRegistry(b, 2), consumer.Config{Name: name, DB: db})
				write := writeEffect(name)
				if inbox {
					must(b, consumer.Handle(c, write))
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
				if n != int64(b.N) {
					b.Fatalf("effects = %d, want %d", n, b.N)
				}
				must(b, db.Where("consumer = ?", name).Delete(&Effect{}).Error)
				must(b, db.Exec(`DELETE FROM `+consumer.DefaultTable+` WHERE consumer = ?`, name).Error)
			})
		}
	}
}

// BenchmarkConsumerKafkaPostgres measures events/s through the whole
// consuming side: kfake (4 partitions) → adapters/kafka subscriber (one
// offset commit per message) → Watermill router → consumer, with the
// handler writing one row on PostgreSQL, with and without the inbox. The
// messages are published before the timer starts.
//
//	go test -run '^$' -bench ConsumerKafkaPostgres -benchtime 5000x ./runtime/consumer
func BenchmarkConsumerKafkaPostgres(b *testing.B) {
	db := prepare(b, hookstest.Postgres(b, nil))
	brk := &broker{addrs: kafkatest.NewCluster(b)}
	for _, members := range []int{1, 4} {
		for _, inbox := range []bool{true, false} {
			name := fmt.Sprintf("inbox=%v/members=%d", inbox, members)
			b.Run(name, func(b *testing.B) {
				topic := fmt.Sprintf("bench-%d", rand.Int64())
				brk.createTopic(b, topic, 4)
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
				c := newConsumer(b, newRegistry(b, 2), consumer.Config{Name: name, DB: db, OnOutcome: func(consumer.Result) {
					if handled.Add(1) == int64(b.N) {
						close(done)
					}
				}})
				write := writeEffect(name)
				if inbox {
					must(b, consumer.Handle(c, write))
				} else {
					must(b, consumer.HandleWithoutInbox(c, func(ctx context.Context, e PaidV2, m consumer.Meta) error {
						return write(ctx, db.WithContext(ctx), e, m)
					}))
				}
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				must(b, err)
				sub := brk.subscriber(b, name)
				for i := range members {
					router.AddConsumerHandler(fmt.Sprintf("%s-%d", name, i), topic, sub, c.HandlerFunc())
				}
				b.ResetTimer()
				go router.Run(context.Background())
				select {
				case <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("handled %d of %d messages in 5 minutes", handled.Load(), b.N)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				must(b, router.Close())
			})
		}
	}
}
