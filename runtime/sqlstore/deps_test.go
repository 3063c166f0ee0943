package sqlstore_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
)

// TestDependencies guards the storage layer's promise: it needs no GORM
// (the relay and the consumer's database/sql users open a plain *sql.DB),
// no SQLite driver (DialectOf knows the drivers by their type's package
// path), no broker client and nothing of the packages built on it.
func TestDependencies(t *testing.T) {
	depstest.Check(t, []string{
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
	}, []string{"github.com/gooutbox/outbox/runtime", "github.com/google/uuid"})
}
