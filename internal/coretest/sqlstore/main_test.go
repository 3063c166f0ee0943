package sqlstore_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestMain runs more tests at once than CPUs: they wait on the databases
// and on lease timers (see runtimetest.Main).
func TestMain(m *testing.M) { runtimetest.Main(m) }
