package dashboard_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestMain runs the Example against the test PostgreSQL, or skips it, saying
// so, when the server does not answer.
func TestMain(m *testing.M) { runtimetest.MainWithPostgresExamples(m) }
