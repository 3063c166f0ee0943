package sqlstore_test

import (
	"database/sql"
	"time"

	"github.com/gooutbox/outbox/internal/testhooks"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// The store's unexported state, through package testhooks.

func stallRenewals(s *sqlstore.Store, stall func()) { testhooks.Sqlstore.StallRenewals(s, stall) }

func staleWake(w *sqlstore.Writer) { testhooks.Sqlstore.StaleWake(w) }

func countsBytesInDatabase(s *sqlstore.Store) bool {
	return testhooks.Sqlstore.CountsBytesInDatabase(s)
}

func takeEvery(s *sqlstore.Store, owner string) time.Duration {
	return testhooks.Sqlstore.TakeEvery(s, owner)
}

func nextRenewal(s *sqlstore.Store, owner string) (due time.Time, running bool) {
	return testhooks.Sqlstore.NextRenewal(s, owner)
}

func scanHolders(rows *sql.Rows, err error) (map[string]int, error) {
	return testhooks.Sqlstore.ScanHolders(rows, err)
}

func postgresStatements(owner string) map[string]testhooks.Statement {
	return testhooks.Sqlstore.PostgresStatements(owner)
}
