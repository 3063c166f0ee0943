package redis_test

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/adapters/redis"
)

var verbose = flag.Bool("redis.log", false, "log the adapters' debug output to stderr")

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 30 * time.Second

func testLogger() *slog.Logger {
	if *verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// serverURL returns OUTBOX_TEST_REDIS_URL or the local server's URL.
func serverURL() string {
	if u := os.Getenv("OUTBOX_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// connect returns a client of the test server, closed by t.Cleanup,
// skipping t (or failing it, when OUTBOX_TEST_REQUIRE_INTEGRATION=1) when
// the server is unreachable.
func connect(t testing.TB) *goredis.Client {
	t.Helper()
	url := serverURL()
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatalf("OUTBOX_TEST_REDIS_URL: %v", err)
	}
	client := goredis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		if os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("Redis at %s is required (OUTBOX_TEST_REQUIRE_INTEGRATION=1) but unreachable: %v", url, err)
		}
		t.Skipf("Redis at %s unreachable (set OUTBOX_TEST_REDIS_URL to use another): %v", url, err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// keyPrefix returns a key prefix unique to this test and deletes every key
// with it when t ends, and the deduplication keys of streams with it
// ("{" + stream + "}:outbox:dedup:<uuid>").
func keyPrefix(t testing.TB, client *goredis.Client) string {
	t.Helper()
	prefix := "outbox-test:" + watermill.NewShortUUID() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var keys []string
		for _, pattern := range []string{prefix + "*", "{" + prefix + "*"} {
			iter := client.Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Errorf("scan %s: %v", pattern, err)
			}
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("delete %d keys: %v", len(keys), err)
			}
		}
	})
	return prefix
}

func newPublisher(t testing.TB, cfg redis.PublisherConfig) *redis.Publisher {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = serverURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	pub, err := redis.NewPublisher(cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func newSubscriber(t testing.TB, cfg redis.SubscriberConfig) *redis.Subscriber {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = serverURL()
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	sub, err := redis.NewSubscriber(cfg)
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
