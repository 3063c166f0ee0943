package sqlstore_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
)

// TestDependencies guards the storage layer's promise: it needs no GORM
// (the relay and the consumer's database/sql users open a plain *sql.DB),
// no SQLite or MySQL driver (DialectOf knows the drivers, and
// mysqlErrorNumber MySQL's errors, by their type's package path: a
// PostgreSQL program links no MySQL driver), no broker client and nothing of the packages built on it.
func TestDependencies(t *testing.T) {
	t.Parallel()
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
		"github.com/go-sql-driver/mysql",
	}, []string{"github.com/gooutbox/outbox/runtime", "github.com/google/uuid"})
}
