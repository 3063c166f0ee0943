package sqs_test

import (
	"context"
	"testing"
	"time"

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
	// 3-min timeout. Each run gets 6 min: in CI, beside adapters/sql's long
	// suite under -race, the SQS run had delivered 4,647 of 5,000 at 3 min.
	const timeout = 6 * time.Minute
	t.Run("sqs", func(t *testing.T) {
		adaptertest.Run(t, adaptertest.Config{BrokerURL: sqstest.BrokerURL(t, "sqs") + "&wait=1s", Timeout: timeout})
	})
	t.Run("sns", func(t *testing.T) {
		// SNS delivers a message only to the queues subscribed when it is
		// published: a group's queue is set up (as an operator or the
		// group's first deployment would) before anything is written.
		uri := sqstest.BrokerURL(t, "sns") + "&wait=1s"
		adaptertest.Run(t, adaptertest.Config{
			BrokerURL: uri,
			Timeout:   timeout,
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
