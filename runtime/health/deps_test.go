package health_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
)

// TestDependencies: health imports only the standard library and runtime
// (which imports only google/uuid), so any service can mount it.
func TestDependencies(t *testing.T) {
	depstest.Only(t, "github.com/gooutbox/outbox/runtime/health", "github.com/gooutbox/outbox/runtime", "github.com/google/uuid")
}
