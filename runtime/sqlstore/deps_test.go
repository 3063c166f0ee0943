package sqlstore_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies guards the storage layer's promise: it needs no GORM
// (the relay and the consumer's database/sql users open a plain *sql.DB),
// no SQLite driver (DialectOf knows the drivers by their type's package
// path), no broker client and nothing of the packages built on it.
func TestDependencies(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"gorm.io",
		"github.com/gooutbox/outbox/hooks",
		"github.com/gooutbox/outbox/adapters",
		"github.com/gooutbox/outbox/runtime/consumer",
		"github.com/glebarez",
		"modernc.org",
		"github.com/mattn",
		"github.com/segmentio/kafka-go",
		"github.com/twmb/franz-go",
		"github.com/lib/pq",
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("runtime/sqlstore depends on %s", dep)
			}
		}
	}
	for _, want := range []string{"github.com/gooutbox/outbox/runtime", "github.com/google/uuid"} {
		if !strings.Contains(" "+strings.Join(deps, " ")+" ", " "+want+" ") {
			t.Errorf("runtime/sqlstore does not depend on %s (go list output changed?)", want)
		}
	}
}
