package runtime_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
)

// TestDependencies guards the promise that domain code embedding
// runtime.Recorder pulls in no database or broker client: runtime imports
// only the standard library and google/uuid.
func TestDependencies(t *testing.T) {
	depstest.Only(t, "github.com/gooutbox/outbox/runtime", "github.com/google/uuid")
}
