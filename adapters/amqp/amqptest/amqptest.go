// Package amqptest finds the RabbitMQ that tests of
// [github.com/gooutbox/outbox/adapters/amqp], and of the packages built on
// it, run against.
//
// [URL] returns the broker named by the OUTBOX_TEST_AMQP_URI environment
// variable (default amqp://guest:guest@127.0.0.1:5672/) once it answers. A
// test skips, saying so, when it does not; under
// OUTBOX_TEST_REQUIRE_INTEGRATION=1 (CI) it fails instead.
package amqptest

import (
	"os"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// EnvURI names the environment variable holding the test broker's URL.
const EnvURI = "OUTBOX_TEST_AMQP_URI"

// DefaultURI is the test broker's URL when EnvURI is not set.
const DefaultURI = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the test broker's URL after connecting to it once (within
// 5s), skipping t when it does not answer, or failing it under
// OUTBOX_TEST_REQUIRE_INTEGRATION=1. Its messages name the URL with the
// password masked.
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURI)
	if url == "" {
		url = DefaultURI
	}
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		redacted := url
		if u, perr := amqp091.ParseURI(url); perr == nil {
			u.Password = "xxxxx"
			redacted = u.String()
		}
		if os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("RabbitMQ at %s is required (OUTBOX_TEST_REQUIRE_INTEGRATION=1) but unreachable: %v", redacted, err)
		}
		t.Skipf("RabbitMQ at %s unreachable (set %s to use another): %v", redacted, EnvURI, err)
	}
	_ = conn.Close()
	return url
}
