package sqlstore_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// seqScan matches a plan's sequential scan of the outbox table itself or
// of its queue, tableSeqScan of the table alone.
var (
	seqScan      = regexp.MustCompile(`Seq Scan on ` + sqlstore.DefaultTable + `(_queue)?(\s|$)`)
	tableSeqScan = regexp.MustCompile(`Seq Scan on ` + sqlstore.DefaultTable + `(\s|$)`)
)

// TestPostgresGenericPlansUseIndexesOnANewTable checks the plans
// PostgreSQL keeps for a relay's per-batch statements when they are
// planned on a new, never analyzed outbox of a few rows, as they are when
// a relay starts with a new deployment. A driver that prepares statements
// (pgx does) gets the generic plan after five runs, and PostgreSQL keeps
// it until the table's statistics change; where autovacuum does not
// analyze the table, that is for as long as the connection lives. A
// sequential scan of the outbox in such a plan reads the whole table,
// published history included, at every batch.
func TestPostgresGenericPlansUseIndexesOnANewTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprint("a", i)
	}
	writeEvents(t, db, sqlstore.Postgres, ids...)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pages int
	var tuples float64
	if err := conn.QueryRowContext(ctx, `SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass`, sqlstore.DefaultTable).Scan(&pages, &tuples); err != nil {
		t.Fatal(err)
	}
	if pages != 0 || tuples >= 0 {
		t.Fatalf("the outbox has statistics (relpages %d, reltuples %v): the test needs a never analyzed table", pages, tuples)
	}
	if _, err := conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for name, st := range postgresStatements("owner-1") {
		t.Run(name, func(t *testing.T) {
			// A prepared statement planned as a driver's is after five
			// runs: generically (plan_cache_mode), its parameters unknown.
			stmt := strings.ReplaceAll(name, " ", "_")
			if _, err := conn.ExecContext(ctx, "PREPARE "+stmt+" AS "+st.SQL); err != nil {
				t.Fatalf("PREPARE %s: %v", name, err)
			}
			params := make([]string, len(st.Args))
			for i := range params {
				params[i] = literal(t, st.Args[i])
			}
			execute := "EXPLAIN EXECUTE " + stmt
			if len(params) > 0 {
				execute += "(" + strings.Join(params, ", ") + ")"
			}
			rows, err := conn.QueryContext(ctx, execute)
			if err != nil {
				t.Fatalf("EXPLAIN %s: %v", name, err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			scan := seqScan
			if name == "stats by type" {
				scan = tableSeqScan // it counts the whole queue
			}
			for _, line := range plan {
				if scan.MatchString(line) {
					t.Errorf("the generic plan of the %s scans the whole outbox:\n%s", name, strings.Join(plan, "\n"))
					break
				}
			}
		})
	}
}

// literal is an argument of PostgresStatements as an SQL literal.
func literal(t *testing.T, v any) string {
	t.Helper()
	switch v := v.(type) {
	case int, int64:
		return fmt.Sprint(v)
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []int64:
		s := make([]string, len(v))
		for i, n := range v {
			s[i] = fmt.Sprint(n)
		}
		return "'{" + strings.Join(s, ",") + "}'"
	}
	t.Fatalf("no literal for %T", v)
	return ""
}

// queueScan matches a plan's scan of the queue of pending rows (its
// primary key), and tableLookup the table's primary key read a row at a
// time.
var (
	queueScan   = regexp.MustCompile(`Index (Only )?Scan using ` + sqlstore.DefaultTable + `_queue_pkey on`)
	tableByKey  = regexp.MustCompile(`Index Scan using ` + sqlstore.DefaultTable + `_pkey on`)
	keyLookup   = regexp.MustCompile(`Index Cond: \(id = q(_[0-9]+)?\.qid\)`)
	lowerBound  = regexp.MustCompile(`Index Cond: .*qid >`)
	neverStarts = "never executed"
)

// TestPostgresClaimReadsTheQueueAsARange checks the plan a relay's claim
// runs at every batch while a backlog drains and payloads are small: it
// steps over the head of the queue of pending rows once (in a long drain,
// before vacuum has run, the head holds the index entries of every row
// marked since, so a second walk from the head, as the claim once had,
// doubles that cost), and reads the window's rows as a range, not a
// primary-key lookup per row.
func TestPostgresClaimReadsTheQueueAsARange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	ids := make([]string, 30)
	for i := range ids {
		ids[i] = fmt.Sprint("a", i)
	}
	writeEvents(t, db, sqlstore.Postgres, ids...)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// On a few rows a sequential scan is cheaper: the plan of a long
	// drain's outbox reads the indexes.
	if _, err := conn.ExecContext(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	st := postgresStatements("owner-1")["claim small"]
	rows, err := conn.QueryContext(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+st.SQL, st.Args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	fromHead, lookups := 0, 0
	for i := 0; i+1 < len(plan); i++ {
		line, next := plan[i], plan[i+1]
		ran := !strings.Contains(line, neverStarts)
		if queueScan.MatchString(line) && ran && !lowerBound.MatchString(next) {
			fromHead++
		}
		if tableByKey.MatchString(line) && ran && keyLookup.MatchString(next) {
			lookups++
		}
	}
	if fromHead != 1 || lookups != 0 {
		t.Errorf("the claim walked the queue from its head %d times (want 1) and looked rows up by key in %d scans (want none):\n%s",
			fromHead, lookups, strings.Join(plan, "\n"))
	}
}
