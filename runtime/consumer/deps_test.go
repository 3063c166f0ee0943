package consumer_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies guards the package's promise: it builds on runtime,
// Watermill, GORM and the storage layer (runtime/sqlstore) only, so a
// consumer works with any Watermill subscriber, any GORM dialector and any
// database/sql driver (HandleTx) without pulling in a broker client, a GORM
// dialector or a SQLite driver. The storage layer brings the PostgreSQL
// (pgx, for the relay's LISTEN) and MySQL (its error numbers) client
// packages, and runtime/relay's types; runtime/sqlstore's own test keeps
// GORM out of it.
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
		"github.com/gooutbox/outbox/adapters",
		"github.com/gooutbox/outbox/hooks",
		"github.com/segmentio/kafka-go",
		"github.com/twmb/franz-go",
		"gorm.io/driver",
		"github.com/glebarez",
		"modernc.org",
		"github.com/mattn",
	}
	var direct []string
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("runtime/consumer depends on %s", dep)
			}
		}
		direct = append(direct, dep)
	}
	for _, want := range []string{"github.com/gooutbox/outbox/runtime", "github.com/gooutbox/outbox/runtime/sqlstore", "github.com/ThreeDotsLabs/watermill/message", "gorm.io/gorm"} {
		if !strings.Contains(" "+strings.Join(direct, " ")+" ", " "+want+" ") {
			t.Errorf("runtime/consumer does not depend on %s (go list output changed?)", want)
		}
	}
}
