// Package runtimetest holds test helpers for gooutbox: [MemoryStore], an
// in-memory [relay.Store] for unit tests and examples that need no database,
// and [TestStore], the conformance suite every relay.Store must pass:
//
//	func TestStore(t *testing.T) {
//		runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
//			s := newEmptyStore(t)
//			return s, func(msgs ...runtime.OutboxMessage) []int64 { return insert(t, s, msgs) }
//		})
//	}
//
// Beyond [relay.Store], the suite checks the operator's side of a store
// when the store has it: [Parker], [Discarder], [StatsReader] and
// [Retainer], which sqlstore.Store and MemoryStore both implement.
//
// Nothing here is meant for production: MemoryStore keeps every message in
// memory until [MemoryStore.DeletePublished] or [MemoryStore.Discard]
// drops it, and loses them all when the process exits.
//
// The database fixtures give a test a database of its own: [PostgresDSN] a
// fresh PostgreSQL schema and [MySQLDSN] a fresh MySQL/MariaDB database,
// each dropped when the test ends, and [SQLiteDSN] the DSN of a SQLite
// file. A server that does not answer skips the test ([Unavailable]), or
// fails it under OUTBOX_TEST_REQUIRE_INTEGRATION=1 ([RequireIntegration]).
// They connect through database/sql by driver name, so that this package
// imports no database driver: the test imports github.com/jackc/pgx/v5/stdlib
// (driver "pgx") or github.com/go-sql-driver/mysql (driver "mysql"). Package
// hooks/hookstest wraps them with GORM openers.
//
// An Example has no *testing.T: [ExamplePostgresDSN] gives it a fresh
// schema, which [MainWithPostgresExamples], the package's TestMain, drops
// after the run; when PostgreSQL does not answer, it skips the Examples,
// saying so, and runs the tests.
//
// # Running the repository's tests
//
// go test $(go list -m -f '{{.Dir}}/...') runs the tests of every module of
// the repository (go list -m lists the modules of go.work, and ./... stops
// at a module's edge); inside one module, go test ./... is the inner loop.
// The tests of hooks, runtime/sqlstore, runtime/consumer, runtime/dashboard
// and adapters/kafka are in module internal/coretest (folders of the same
// names), because they need SQLite, MySQL and an in-process Kafka, which
// the root module does not require; their Examples stay in the packages,
// on PostgreSQL, but for adapters/kafka's publish-and-consume Example, which
// needs the in-process Kafka.
// The tests need only Go; those that need a server use it when it answers
// and are skipped, saying so, when it does not:
//
//   - OUTBOX_TEST_POSTGRES_DSN selects the PostgreSQL server (default
//     postgres://postgres@127.0.0.1:5432/test?sslmode=disable; each test
//     gets its own schema, see [PostgresDSN]); OUTBOX_TEST_MYSQL_DSN the
//     MySQL or MariaDB server (default root@tcp(127.0.0.1:3306)/?parseTime=true;
//     each test gets its own database, see [MySQLDSN]);
//   - OUTBOX_TEST_KAFKA_BROKERS a real Kafka cluster instead of the
//     in-process one;
//   - OUTBOX_TEST_AMQP_URI (default amqp://guest:guest@127.0.0.1:5672/),
//     OUTBOX_TEST_NATS_URL (nats://127.0.0.1:4222, with JetStream) and
//     OUTBOX_TEST_REDIS_URL (redis://127.0.0.1:6379/0) the servers of the
//     adapters' tests and the broker conformance suite;
//   - OUTBOX_TEST_SQS_ENDPOINT an SQS/SNS endpoint (LocalStack, say) instead
//     of the in-process fake.
//
// OUTBOX_TEST_REQUIRE_INTEGRATION=1 turns a skipped integration test into a
// failure. [EnvLong] (OUTBOX_TEST_LONG=1) turns on the long tiers:
// Watermill's conformance suites at their stress sizes and their stress
// variants, the outbox conformance suite (adapters/adaptertest) at 5,000
// events instead of 1,000, the correctness suite's core tier (45 s of load
// with every fault, on PostgreSQL, MariaDB and with sharing relays; without
// the switch, a 15-s smoke run with relay kills and crashes on PostgreSQL)
// and the benchmark program's smoke runs. CI (.ci/run) runs the same command
// with OUTBOX_TEST_LONG=1 OUTBOX_TEST_REQUIRE_INTEGRATION=1 and -race -timeout
// 20m. The race detector needs cgo, so it works only where a C compiler is
// installed: go test -race ./... fails with "-race requires cgo" without
// one; use go test ./..., or install one (apt-get install gcc) and keep
// CGO_ENABLED=1.
//
// The storage tests run eight at a time ([Main]: they wait on databases and
// lease timers, not on the CPU), so two test binaries at a time can hold
// more than PostgreSQL's default 100 connections and MariaDB's 151; .ci/run
// raises both max_connections to 500 (PostgreSQL: ALTER SYSTEM SET
// max_connections = 500, then restart the server; MariaDB: SET GLOBAL
// max_connections = 500).
package runtimetest
