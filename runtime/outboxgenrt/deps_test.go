package outboxgenrt_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
)

// TestDependencies guards the promise that generated code pulls in nothing
// beyond package runtime: outboxgenrt imports only the standard library,
// github.com/google/uuid and runtime.
func TestDependencies(t *testing.T) {
	depstest.Only(t, "github.com/gooutbox/outbox/runtime/outboxgenrt", "github.com/gooutbox/outbox/runtime", "github.com/google/uuid")
}
