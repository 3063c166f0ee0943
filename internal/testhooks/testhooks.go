// Package testhooks lets the tests of the core packages reach the state
// those packages keep unexported.
//
// The tests of hooks, runtime/sqlstore, runtime/consumer and adapters/kafka
// run against SQLite, MySQL/MariaDB and an in-process Kafka, whose drivers
// the root module must not require (a program pays only for what it
// imports), so they live in the module internal/coretest, where an
// export_test.go file cannot reach. Each package below fills its struct from
// an init function; the tests call through it. Nothing else reads these
// values, and no package changes them after init. Being internal, they are
// no API: only this repository's packages can import them.
package testhooks

import (
	"database/sql"
	"time"
)

// Statement is an SQL statement and its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// Sqlstore holds runtime/sqlstore's hooks. Store and Writer arguments are
// *sqlstore.Store and *sqlstore.Writer.
var Sqlstore struct {
	// StallRenewals calls stall inside every lease renewal's transaction,
	// before it commits.
	StallRenewals func(store any, stall func())
	// LateLock makes the owner's session lock look unanswered since a
	// second ago, as its check's timer finds it in a process that was
	// paused: the owner's batches end and claims wait for an answered
	// check. Answers count again once answer is called. answer is nil
	// when the owner holds no lock.
	LateLock func(store any, owner string) (answer func())
	// StaleWake makes a writer's wake-up register look unread for ever.
	StaleWake func(writer any)
	// CountsBytesInDatabase reports whether the store's claims measure the
	// payloads in the database (large rows were seen).
	CountsBytesInDatabase func(store any) bool
	// TakeEvery returns how often the owner tries to take shards.
	TakeEvery func(store any, owner string) time.Duration
	// NextRenewal returns when the owner's lease is next renewed, and
	// whether a renewal is running.
	NextRenewal func(store any, owner string) (due time.Time, running bool)
	// ScanHolders reads the (owner, shards held) rows of a holders query.
	ScanHolders func(rows *sql.Rows, err error) (map[string]int, error)
	// PostgresStatements returns the default table's mark, claim and small
	// claim statements on PostgreSQL, as owner would run them.
	PostgresStatements func(owner string) map[string]Statement
	// MySQLErrorNumber returns the number of the first MySQL driver error
	// in err's tree.
	MySQLErrorNumber func(err error) (uint16, bool)
	// IsDuplicateKey reports whether err is a duplicate-key violation.
	IsDuplicateKey func(err error) bool
	// Transient reports whether the store retries err.
	Transient func(err error) bool
}

// Hooks holds package hooks' hooks. Plugin arguments are *hooks.Plugin.
var Hooks struct {
	// SetOrderLocks turns the per-aggregate commit-order locks on or off.
	SetOrderLocks func(plugin any, on bool)
}

// Kafka holds adapters/kafka's hooks. Subscriber and Publisher values are
// *kafka.Subscriber and *kafka.Publisher, configs kafka.PublisherConfig.
var Kafka struct {
	// SetStallWarnAfter sets how long a partition waits before it warns.
	SetStallWarnAfter func(subscriber any, d time.Duration)
	// Fetch is the subscriber's fetch: a func(context.Context,
	// *kafka.Reader, *slog.Logger, time.Duration) (kafka.Message, bool).
	Fetch any
	// NewUnfencedPublisher returns a publisher whose writers share a
	// transport without the fence.
	NewUnfencedPublisher func(cfg any) (any, error)
	// Classify sorts a publish error into transient or permanent.
	Classify func(err error) error
}
