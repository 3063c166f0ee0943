package runtimetest

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
)

// examples holds the schemas [ExamplePostgresDSN] created, for
// [MainWithPostgresExamples] to drop. An Example has no *testing.T to
// clean up after it, so the run does.
var examples struct {
	mu      sync.Mutex
	admin   *sql.DB
	schemas []string
}

// MainWithPostgresExamples is [Main] for a package whose Examples run
// against the test PostgreSQL ([PostgresBaseDSN]) through
// [ExamplePostgresDSN]; the test binary must register the database/sql
// driver "pgx" (import github.com/jackc/pgx/v5/stdlib, or GORM's
// PostgreSQL driver, which does).
//
// When the server does not answer, the Examples are skipped (as
// -skip '^Example' would) with a line naming the address, and the tests run;
// with OUTBOX_TEST_REQUIRE_INTEGRATION=1 the run fails instead. The schemas
// the Examples created are dropped after the run.
//
//	func TestMain(m *testing.M) { runtimetest.MainWithPostgresExamples(m) }
func MainWithPostgresExamples(m *testing.M) int {
	// The command line first, so that a -skip of its own is kept beside
	// the Examples' (m.Run would parse it over skipExamples' value).
	if !flag.Parsed() {
		flag.Parse()
	}
	base := PostgresBaseDSN()
	admin, err := dial("pgx", base)
	if err != nil {
		if RequireIntegration() {
			fmt.Fprintf(os.Stderr, "the Examples need PostgreSQL at %s (OUTBOX_TEST_REQUIRE_INTEGRATION=1), which is unreachable: %v\n", redact(base), err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "Examples skipped: PostgreSQL at %s unreachable (set OUTBOX_TEST_POSTGRES_DSN to use another): %v\n", redact(base), err)
		skipExamples()
		return Main(m)
	}
	examples.mu.Lock()
	examples.admin = admin
	examples.mu.Unlock()
	defer func() {
		examples.mu.Lock()
		defer examples.mu.Unlock()
		for _, s := range examples.schemas {
			if _, err := admin.Exec(`DROP SCHEMA IF EXISTS ` + s + ` CASCADE`); err != nil {
				fmt.Fprintf(os.Stderr, "drop example schema %s: %v\n", s, err)
			}
		}
		examples.schemas, examples.admin = nil, nil
		admin.Close()
	}()
	return Main(m)
}

// skipExamples adds '^Example' to the run's -test.skip.
func skipExamples() {
	f := flag.Lookup("test.skip")
	if f == nil {
		return
	}
	pattern := "^Example"
	if v := f.Value.String(); v != "" {
		pattern = v + "|" + pattern
	}
	_ = f.Value.Set(pattern)
}

// ExamplePostgresDSN creates a new schema (outbox_example_<hex>) in the test
// PostgreSQL and returns a DSN whose search_path is that schema, for an
// Example: what [PostgresDSN] is for a test. It needs
// [MainWithPostgresExamples] as the package's TestMain, which drops the
// schema after the run (an Example that exits the process, through
// log.Fatal say, leaves it behind); without it, or when the schema cannot
// be created, it panics.
func ExamplePostgresDSN() string {
	examples.mu.Lock()
	defer examples.mu.Unlock()
	if examples.admin == nil {
		panic("runtimetest.ExamplePostgresDSN: the package's TestMain must be runtimetest.MainWithPostgresExamples")
	}
	schema := "outbox_example_" + randomHex(6)
	if _, err := examples.admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		panic(fmt.Sprintf("runtimetest.ExamplePostgresDSN: create schema %s: %v", schema, err))
	}
	examples.schemas = append(examples.schemas, schema)
	dsn, err := schemaDSN(PostgresBaseDSN(), schema)
	if err != nil {
		panic("runtimetest.ExamplePostgresDSN: " + err.Error())
	}
	return dsn
}
