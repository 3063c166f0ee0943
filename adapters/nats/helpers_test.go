package nats_test

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/nats"
)

var verbose = flag.Bool("nats.log", false, "log the adapters' debug output to stderr")

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 30 * time.Second

func testLogger() *slog.Logger {
	if *verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// serverURL returns OUTBOX_TEST_NATS_URL or the local server's URL.
func serverURL() string {
	if u := os.Getenv("OUTBOX_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// connect connects to the test server with JetStream, skipping t (or
// failing it, when OUTBOX_TEST_REQUIRE_INTEGRATION=1) when it is
// unreachable. The connection is closed by t.Cleanup.
func connect(t testing.TB) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	url := serverURL()
	nc, err := natsgo.Connect(url, natsgo.Timeout(3*time.Second))
	var js jetstream.JetStream
	if err == nil {
		js, err = jetstream.New(nc)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
		}
		if err != nil {
			nc.Close()
		}
	}
	if err != nil {
		if os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("NATS JetStream at %s is required (OUTBOX_TEST_REQUIRE_INTEGRATION=1) but unreachable: %v", url, err)
		}
		t.Skipf("NATS JetStream at %s unreachable (set OUTBOX_TEST_NATS_URL to use another): %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// streamPrefix returns a stream prefix unique to this test and deletes
// every stream with it when t ends, so the server does not fill up.
func streamPrefix(t testing.TB, js jetstream.JetStream) string {
	t.Helper()
	prefix := "T" + strings.ReplaceAll(watermill.NewShortUUID(), "-", "")
	t.Cleanup(func() { deleteStreams(t, js, prefix) })
	return prefix
}

func deleteStreams(t testing.TB, js jetstream.JetStream, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var mine []string
	for n := range names.Name() {
		if strings.HasPrefix(n, prefix+"_") {
			mine = append(mine, n)
		}
	}
	for _, n := range mine {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Errorf("delete stream %s: %v", n, err)
		}
	}
}

func newPublisher(t testing.TB, cfg nats.PublisherConfig) *nats.Publisher {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = serverURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	pub, err := nats.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func newSubscriber(t testing.TB, cfg nats.SubscriberConfig) *nats.Subscriber {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = serverURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := nats.NewSubscriber(cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// receive returns the next message from ch, failing t after waitTimeout.
func receive(t testing.TB, ch <-chan *message.Message) *message.Message {
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

// noMessage fails t if ch yields a message before a short grace period
// passes. (Absence can only be checked over a period; the test does not
// depend on its length for anything but catching a duplicate.)
func noMessage(t testing.TB, ch <-chan *message.Message, within time.Duration) {
	t.Helper()
	select {
	case msg := <-ch:
		t.Fatalf("unexpected message %s (%s)", msg.UUID, msg.Payload)
	case <-time.After(within):
	}
}
