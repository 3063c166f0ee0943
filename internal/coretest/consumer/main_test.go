package consumer_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestMain runs more tests at once than CPUs: they wait on databases,
// brokers and timers (see runtimetest.Main).
func TestMain(m *testing.M) { runtimetest.Main(m) }
