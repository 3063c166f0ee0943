package kafka_test

import (
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// BenchmarkPublish measures one Publish call of 2 and of 1,000 events of
// distinct aggregates to an 8-partition topic of an in-process broker
// (kfake), with the default config: the relay's publish at a low and at a
// high rate. Its bytes per call are mostly kafka-go's per-partition batches,
// which the publisher sizes to the call (see PublisherConfig.BatchSize).
// fenced=false is the same publisher with its writers' connections not
// fenced (see Fencing on Publisher), run beside it to show what the fence
// costs.
//
//	go test -run '^$' -bench Publish -benchmem ./internal/coretest/kafka/
func BenchmarkPublish(b *testing.B) {
	cluster, err := kafkatest.Start(kafkatest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Addrs()
	topic := newTopic(b, brokers, 8)
	for _, n := range []int{2, 1000} {
		for _, fenced := range []bool{true, false} {
			b.Run(fmt.Sprintf("events=%d/fenced=%v", n, fenced), func(b *testing.B) {
				cfg := kafka.PublisherConfig{Brokers: brokers, Logger: testLogger()}
				newPub := kafka.NewPublisher
				if !fenced {
					newPub = newUnfencedPublisher
				}
				pub, err := newPub(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer pub.Close()
				msgs := make([]*message.Message, n)
				for i := range msgs {
					msgs[i] = newEvent(fmt.Sprintf("order-%d", i), `{"amount":"42.00"}`)
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := pub.Publish(topic, msgs...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
