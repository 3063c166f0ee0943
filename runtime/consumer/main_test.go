package consumer_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestMain runs the Examples against the test PostgreSQL, or skips them,
// saying so, when the server does not answer. The consumer's tests, which
// need SQLite, MySQL and an in-process Kafka too, are in module
// internal/coretest.
func TestMain(m *testing.M) { runtimetest.MainWithPostgresExamples(m) }
