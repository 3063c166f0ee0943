package memory_test

import (
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against memory://. In one process: the relays run in the test process and
// are stopped by cancelling them instead of SIGKILL.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Config{BrokerURL: "memory://"})
}
