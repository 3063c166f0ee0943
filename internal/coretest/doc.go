// Package coretest is the module of the core packages' tests: those of
// hooks, runtime/sqlstore, runtime/consumer, runtime/dashboard and
// adapters/kafka, each in the folder of that name here.
//
// They run on PostgreSQL, MySQL/MariaDB and SQLite and against an
// in-process Kafka, so they need drivers that a program using gooutbox must
// not be made to require: a go.mod lists every module its packages' tests
// import, and the root module's requirements become its users'. Here those
// requirements stay in this module, which no one imports (as GORM keeps its
// tests in a module of their own). The packages keep their Examples, which
// run against PostgreSQL.
//
// The tests reach the packages' unexported state through
// internal/testhooks, where an export_test.go file used to serve. Run them
// from the repository root with the README's test command, or here:
//
//	cd internal/coretest && go test ./...
//
// The servers they use and their variables: package runtime/runtimetest.
package coretest
