package consumer_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
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
	t.Parallel()
	depstest.Check(t, []string{
		"github.com/gooutbox/outbox/adapters",
		"github.com/gooutbox/outbox/hooks",
		"github.com/segmentio/kafka-go",
		"github.com/twmb/franz-go",
		"gorm.io/driver",
		"github.com/glebarez",
		"modernc.org",
		"github.com/mattn",
	}, []string{"github.com/gooutbox/outbox/runtime", "github.com/gooutbox/outbox/runtime/sqlstore", "github.com/ThreeDotsLabs/watermill/message", "gorm.io/gorm"})
}
