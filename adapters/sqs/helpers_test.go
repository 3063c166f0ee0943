package sqs_test

import (
	"flag"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/sqs"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

var verbose = flag.Bool("sqs.log", false, "log the adapters' debug output to stderr")

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 15 * time.Second

// testWaitTime is the subscribers' long-polling wait in tests.
const testWaitTime = time.Second

// testVisibility is the visibility timeout of the subscribers' receives in
// tests, shorter than the queue default of 30s and than the suite's 15s
// waits: a ReceiveMessage whose response is lost on the way (the AWS SDK
// reports "deserialization failed ... use of closed network connection"
// now and then, against AWS too, see aws/aws-sdk-go-v2#1825 and #2935, and
// under -race here) leaves its messages, and on a FIFO queue their groups,
// hidden until it ends; they are then delivered again, in order.
const testVisibility = 8 * time.Second

func testLogger() *slog.Logger {
	if *verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// clientConfig returns a ClientConfig for endpoint.
func clientConfig(endpoint string) sqs.ClientConfig {
	cfg := sqstest.AWSConfig()
	return sqs.ClientConfig{Endpoint: endpoint, AWSConfig: &cfg}
}

func newPublisher(t *testing.T, cfg sqs.PublisherConfig) *sqs.Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	pub, err := sqs.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func newSNSPublisher(t *testing.T, cfg sqs.SNSPublisherConfig) *sqs.SNSPublisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	pub, err := sqs.NewSNSPublisher(cfg)
	if err != nil {
		t.Fatalf("NewSNSPublisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func newSubscriber(t *testing.T, cfg sqs.SubscriberConfig) *sqs.Subscriber {
	t.Helper()
	if cfg.WaitTime == 0 {
		cfg.WaitTime = testWaitTime
	}
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = testVisibility
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := sqs.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() {
		if err := sub.Close(); err != nil {
			t.Errorf("Subscriber.Close: %v", err)
		}
	})
	return sub
}

// receive returns the next message from ch, failing t after waitTimeout.
func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if !ok {
			t.Fatal("subscription channel closed, want a message")
		}
		return msg
	case <-time.After(waitTimeout):
		t.Fatalf("no message within %s", waitTimeout)
	}
	return nil
}

// newTopic returns a topic name unique to this run.
func newTopic() string { return "topic-" + watermill.NewShortUUID() }

// parallelWhenShort runs a heavy suite (the conformance suite, Watermill's)
// beside the others in the short tier, where they mostly wait on long
// polls; in the long tier (runtimetest.EnvLong) they run one after the
// other: under the race detector, the in-process fake serving them all at
// full sizes takes them past their timeouts.
func parallelWhenShort(t *testing.T) {
	if !runtimetest.Long() {
		t.Parallel()
	}
}
