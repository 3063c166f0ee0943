package sql_test

import (
	"bytes"
	"context"
	gosql "database/sql"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	watermillsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/sql"
)

// The benchmarks run this package and watermill-sql with its default
// PostgreSQL schema and offsets adapter (the layout this package used
// before, with a BYTEA payload) side by side on the same server, as
// sub-benchmarks "gooutbox" and "watermill-sql":
//
//	go test -run '^$' -bench . -benchtime 3x ./adapters/sql/
//
// Each reports events/s.

// benchBatch is the messages of one Publish, as the relay sends them.
const benchBatch = 100

// benchPubSub is one side of the comparison.
type benchPubSub struct {
	name string
	pub  func(b *testing.B, db *gosql.DB) message.Publisher
	sub  func(b *testing.B, db *gosql.DB, group string) message.Subscriber
}

func benchSides() []benchPubSub {
	logger := watermill.NopLogger{}
	return []benchPubSub{
		{
			name: "gooutbox",
			pub:  func(b *testing.B, db *gosql.DB) message.Publisher { return newPublisher(b, db) },
			sub: func(b *testing.B, db *gosql.DB, group string) message.Subscriber {
				return newSubscriber(b, db, sql.SubscriberConfig{ConsumerGroup: group, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			},
		},
		{
			name: "watermill-sql",
			pub: func(b *testing.B, db *gosql.DB) message.Publisher {
				p, err := watermillsql.NewPublisher(watermillsql.BeginnerFromStdSQL(db), watermillsql.PublisherConfig{SchemaAdapter: legacySchema, AutoInitializeSchema: true}, logger)
				if err != nil {
					b.Fatal(err)
				}
				return p
			},
			sub: func(b *testing.B, db *gosql.DB, group string) message.Subscriber {
				s, err := watermillsql.NewSubscriber(watermillsql.BeginnerFromStdSQL(db), watermillsql.SubscriberConfig{
					ConsumerGroup:    group,
					PollInterval:     10 * time.Millisecond,
					SchemaAdapter:    legacySchema,
					OffsetsAdapter:   watermillsql.DefaultPostgreSQLOffsetsAdapter{},
					InitializeSchema: true,
				}, logger)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				return s
			},
		},
	}
}

// benchMessages returns n messages of 236-byte payloads over 100
// aggregates.
func benchMessages(n int) []*message.Message {
	payload := bytes.Repeat([]byte("x"), 236)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = newMessage(i%100, i/100)
		msgs[i].Payload = payload
	}
	return msgs
}

// BenchmarkPublish publishes batches of benchBatch messages to one topic,
// from 1 and from 4 goroutines (4 relays sharing the work, say).
func BenchmarkPublish(b *testing.B) {
	for _, side := range benchSides() {
		for _, writers := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/writers=%d", side.name, writers), func(b *testing.B) {
				db := newDB(b, 0)
				pub := side.pub(b, db)
				if err := pub.Publish("bench", benchMessages(1)...); err != nil { // creates the tables
					b.Fatal(err)
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				errs := make(chan error, writers)
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < b.N; i += writers {
							if err := pub.Publish("bench", benchMessages(benchBatch)...); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkConsume reads b.N batches of benchBatch messages, published
// beforehand, with one subscriber that acks each.
func BenchmarkConsume(b *testing.B) {
	for _, side := range benchSides() {
		b.Run(side.name, func(b *testing.B) {
			db := newDB(b, 0)
			pub := side.pub(b, db)
			for range b.N {
				if err := pub.Publish("bench", benchMessages(benchBatch)...); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.ResetTimer()
			ch, err := side.sub(b, db, "g").Subscribe(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N * benchBatch {
				select {
				case msg := <-ch:
					msg.Ack()
				case <-time.After(waitTimeout):
					b.Fatalf("received %d of %d", i, b.N*benchBatch)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
