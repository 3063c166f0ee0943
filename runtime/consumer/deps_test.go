package consumer_test

import (
	"testing"

	"github.com/gooutbox/outbox/runtime/internal/depstest"
)

// TestDependencies guards the package's promise: it builds on runtime,
// Watermill and the storage layer (runtime/sqlstore) only, so a consumer
// works with any Watermill subscriber and any of the storage layer's
// drivers without pulling in GORM (hooks.NewDriver brings it for GORM
// handlers), a broker client or a SQLite driver. The storage layer brings the PostgreSQL
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
		"gorm.io",
		"github.com/glebarez",
		"modernc.org",
		"github.com/mattn",
	}, []string{"github.com/gooutbox/outbox/runtime", "github.com/gooutbox/outbox/runtime/sqlstore", "github.com/ThreeDotsLabs/watermill/message"})
}
