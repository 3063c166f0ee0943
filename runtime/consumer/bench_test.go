package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

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
