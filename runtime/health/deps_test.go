package health_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: health imports only the standard library and runtime
// (which imports only google/uuid), so any service can mount it.
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
		case "github.com/gooutbox/outbox/runtime/health", "github.com/gooutbox/outbox/runtime", "github.com/google/uuid":
		default:
			t.Errorf("runtime/health depends on %s; it may import only the standard library and runtime", dep)
		}
	}
}
