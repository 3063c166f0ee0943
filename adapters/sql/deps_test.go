package sql_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesStayHere checks that watermill-sql is compiled only into
// programs that import this package (or adapters/broker): not into runtime,
// hooks, or the other adapters.
func TestDependenciesStayHere(t *testing.T) {
	if testing.Short() {
		t.Skip("go list skipped with -short")
	}
	for _, pkg := range []string{"runtime", "runtime/relay", "hooks", "adapters/kafka", "adapters/memory"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/gooutbox/outbox/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		if strings.Contains(string(out), "watermill-sql") {
			t.Errorf("%s depends on watermill-sql", pkg)
		}
	}
}
