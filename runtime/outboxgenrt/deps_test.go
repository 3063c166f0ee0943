package outboxgenrt_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies guards the promise that generated code pulls in nothing
// beyond package runtime: outboxgenrt imports only the standard library,
// github.com/google/uuid and runtime.
func TestDependencies(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/gooutbox/outbox/runtime/outboxgenrt", "github.com/gooutbox/outbox/runtime", "github.com/google/uuid":
		default:
			t.Errorf("outboxgenrt depends on %s; it may import only the standard library, github.com/google/uuid and runtime", dep)
		}
	}
}
