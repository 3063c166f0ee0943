package sql_test

import (
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/hooks/hookstest"
)

// TestConformance runs the conformance suite (package adapters/adaptertest)
// against watermill-sql on PostgreSQL through the URL a user passes to the
// relay command, its tables in a schema of their own, dropped after.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Config{BrokerURL: hookstest.PostgresDSN(t)})
}
