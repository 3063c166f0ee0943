package hooks_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestMain runs the Examples against the test PostgreSQL, or skips them,
// saying so, when the server does not answer. The plugin's tests, which need
// SQLite and MySQL too, are in module internal/coretest.
func TestMain(m *testing.M) { runtimetest.MainWithPostgresExamples(m) }
