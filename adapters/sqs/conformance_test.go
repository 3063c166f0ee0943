package sqs_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against SQS FIFO and SNS FIFO (the in-process fake of package sqstest)
// through the URLs a user passes to the relay command. wait=1s: a
// subscriber's Close waits for its long poll in progress, 20s by default.
func TestConformance(t *testing.T) {
	parallelWhenShort(t)
	// One after the other: under the race detector, the in-process fake
	// serving both runs at 5,000 events each took SNS past the suite's
	// 3-min timeout.
	t.Run("sqs", func(t *testing.T) {
		adaptertest.Run(t, adaptertest.Config{BrokerURL: sqstest.BrokerURL(t, "sqs") + "&wait=1s"})
	})
	t.Run("sns", func(t *testing.T) {
		// SNS delivers a message only to the queues subscribed when it is
		// published: a group's queue is set up (as an operator or the
		// group's first deployment would) before anything is written.
		uri := sqstest.BrokerURL(t, "sns") + "&wait=1s"
		adaptertest.Run(t, adaptertest.Config{
			BrokerURL: uri,
			Provision: func(ctx context.Context, topic string) error {
				b, err := broker.Open(ctx, uri, broker.Config{})
				if err != nil {
					return err
				}
				defer b.Close()
				sub, err := b.Subscriber("conformance")
				if err != nil {
					return err
				}
				return sub.(message.SubscribeInitializer).SubscribeInitialize(topic)
			},
		})
	})
}
