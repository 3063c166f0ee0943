package main

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// TestMain lets the test binary serve as the suite's child processes: when
// the suite re-executes it with a role in the environment, it runs that
// role instead of the tests.
func TestMain(m *testing.M) {
	if role := roleFromEnv(); role != "" {
		os.Exit(runRole(role, os.Stderr))
	}
	os.Exit(m.Run())
}

// Environment variables that tune TestCorrectness.
const (
	// envSeed replays a run (default: a seed from the clock, printed).
	envSeed = "OUTBOX_CORRECTNESS_SEED"
	// envScenario selects the faults, as -scenario does: "all" (default),
	// "none", or a comma-separated list (kill,stop,partition,ambiguous,
	// longtx,poison,consumer,dbfreeze,dbrefuse,terminate,brokerdown,
	// brokercut,freeze,netsplit,crash).
	envScenario = "OUTBOX_CORRECTNESS_SCENARIO"
	// envRelays sets the number of relay processes (default 3).
	envRelays = "OUTBOX_CORRECTNESS_RELAYS"
	// envPaths selects the write paths, as -paths does: "all" (default),
	// "save" or "enqueue".
	envPaths = "OUTBOX_CORRECTNESS_PATHS"
	// envRelay selects the relays, as -relay does: "poll" (default) or
	// "cdc".
	envRelay = "OUTBOX_CORRECTNESS_RELAY"
	// envLong runs the soak tier: 3 minutes of load, 4 relays, 8 writers
	// (beyond CI's long tier, runtimetest.EnvLong, which runs the core
	// tier).
	envLong = "OUTBOX_CORRECTNESS_LONG"
)

// TestCorrectness runs the suite's core tier (45 s of load with every
// fault, then the drain and the checks; about 50 s) against the local
// PostgreSQL in the long test tier (runtimetest.EnvLong, which CI sets);
// otherwise a smoke tier of 15 s with relay kills and crashes, and fails on any lost event, ghost, order violation on the
// broker or at the consumer, duplicate effect, log duplicates above the
// bound (see the package comment), a stale record of a relay that lost its
// shards (freeze, netsplit), or a measured fault (stop, dbfreeze, dbrefuse,
// terminate, brokerdown, brokercut, freeze, netsplit, crash) whose probes
// reached the broker later than its liveness bound.
func TestCorrectness(t *testing.T) {
	testCorrectness(t, "postgres")
}

// TestCorrectnessMySQL runs the core tier as TestCorrectness does with the
// outbox, the writers' transactions and the relays on the local MySQL or
// MariaDB (OUTBOX_TEST_MYSQL_DSN, default hookstest.DefaultMySQLDSN); the
// consumer's inbox and apply log stay on PostgreSQL.
func TestCorrectnessMySQL(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "the correctness suite's core tier on MySQL")
	testCorrectness(t, "mysql")
}

// TestCorrectnessCDC runs the core tier as TestCorrectness does with CDC
// relays (-relay cdc): three relay processes on one logical replication
// slot of the run (pgcdc, Table mode), one streaming while the others
// stand by, under every fault; the holder of the slot stands for the
// holder of the shards, and the liveness bounds are made of pgcdc's
// settings (cdcBound). It needs wal_level = logical.
func TestCorrectnessCDC(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "the correctness suite's core tier with CDC relays")
	testCorrectness(t, "postgres", func(o *options) { o.Name, o.Relay = "cdc", relayCDC })
}

// TestCorrectnessSharing runs the core tier as TestCorrectness does with
// every relay taking a share of the outbox (sqlstore.StoreConfig
// MaxActiveRelays 64), where the defaults have one relay publish and the
// others stand by: kills, stops and restarts then move shards between
// relays that all publish.
func TestCorrectnessSharing(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "the correctness suite's core tier with relays sharing")
	testCorrectness(t, "postgres", func(o *options) { o.Name, o.MaxActiveRelays = "sharing", sqlstore.Shards })
}

func testCorrectness(t *testing.T, db string, with ...func(*options)) {
	if testing.Short() {
		t.Skip("the correctness suite runs real processes for about a minute")
	}
	opt := defaultOptions()
	opt.Name = "core"
	if !runtimetest.Long() {
		opt.Name, opt.Duration, opt.Drain = "smoke", 15*time.Second, 30*time.Second
		opt.Faults, _ = parseScenario("kill,crash")
	}
	if os.Getenv(envLong) == "1" {
		opt.Name, opt.Duration, opt.Drain, opt.Relays, opt.Writers = "long", 3*time.Minute, 60*time.Second, 4, 8
	}
	for _, f := range with {
		f(&opt)
	}
	opt.DB = db
	opt.BaseDSN = hookstest.PostgresBaseDSN()
	opt.MySQLDSN = hookstest.MySQLBaseDSN()
	opt.Seed = time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv(envSeed); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		opt.Seed = seed
	}
	if s := os.Getenv(envScenario); s != "" {
		faults, err := parseScenario(s)
		if err != nil {
			t.Fatal(err)
		}
		opt.Faults = faults
	}
	if s := os.Getenv(envRelays); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", envRelays, s)
		}
		opt.Relays = n
	}
	if s := os.Getenv(envRelay); s != "" {
		opt.Relay = s
		if err := opt.checkRelay(); err != nil {
			t.Fatalf("%s: %v", envRelay, err)
		}
	}
	if s := os.Getenv(envPaths); s != "" {
		paths, err := parsePaths(s)
		if err != nil {
			t.Fatal(err)
		}
		opt.Paths = paths
	}
	var progress strings.Builder
	opt.Verbose = &progress
	t.Logf("seed %d (replay: %s=%d), db %s, scenario %s, paths %s, %d %s relays (at most %d active; 0: the default, 1)",
		opt.Seed, envSeed, opt.Seed, opt.DB, scenarioName(opt.Faults), pathsName(opt.Paths), opt.Relays, opt.Relay, opt.MaxActiveRelays)

	ctx, cancel := context.WithTimeout(context.Background(), opt.Duration+opt.Drain+2*time.Minute)
	defer cancel()
	res, err := runSuite(ctx, opt)
	if errors.Is(err, pgcdc.ErrWALLevel) {
		hookstest.Unavailable(t, "PostgreSQL with wal_level = logical (ALTER SYSTEM SET wal_level = logical, then a restart; .ci/run does it)", redact(opt.BaseDSN), "OUTBOX_TEST_POSTGRES_DSN", err)
	}
	if errors.Is(err, errUnavailable) {
		if db == "mysql" { // the error says which of the two did not answer
			hookstest.Unavailable(t, "MySQL or PostgreSQL", "its address", "OUTBOX_TEST_MYSQL_DSN or OUTBOX_TEST_POSTGRES_DSN", err)
		}
		hookstest.Unavailable(t, "PostgreSQL", redact(opt.BaseDSN), "OUTBOX_TEST_POSTGRES_DSN", err)
	}
	t.Log("progress:\n" + progress.String())
	if err != nil {
		t.Fatalf("seed %d: %v", opt.Seed, err)
	}
	var out strings.Builder
	report(&out, res)
	t.Log("\n" + out.String())
	for _, f := range res.Failures {
		t.Errorf("seed %d: %s", opt.Seed, f)
	}
	if !res.passed() {
		t.Errorf("seed %d: processes' logs and every violating id kept in %s (schema %s kept)", opt.Seed, res.Dir, res.Schema)
	}
}

// redact hides the password of a DSN.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Redacted()
}

// TestCheck feeds the checker a hand-made ledger, log and apply log, so
// that what it counts is known: it must find a lost event, a ghost, an
// inversion across two transactions whose commit order is known, and one
// within a transaction; it must accept a pair of concurrent transactions
// either way round and a redelivered tail, and count duplicates.
func TestCheck(t *testing.T) {
	ev := func(id, agg string, tx int64, seq int) ledgerEvent {
		return ledgerEvent{ID: id, AggregateID: agg, Tx: tx, Seq: seq}
	}
	in := checkInput{
		Ledger: map[string]ledgerEvent{
			"a1": ev("a1", "A", 1, 1), "a2": ev("a2", "A", 2, 1), "a3": ev("a3", "A", 3, 1),
			"b1": ev("b1", "B", 4, 1), "b2": ev("b2", "B", 4, 2),
			"c1": ev("c1", "C", 5, 1), "c2": ev("c2", "C", 6, 1),
			"lost": ev("lost", "D", 7, 1), "poison": ev("poison", "E", 8, 1),
		},
		Commits: map[int64]commitWindow{
			1: {10, 20}, 2: {30, 40}, 3: {50, 60}, // A: 1 < 2 < 3 known
			4: {10, 20},
			5: {10, 30}, 6: {20, 40}, // C: concurrent, either order is fine
			7: {10, 20}, 8: {10, 20},
		},
		Poison: map[string]bool{"poison": true},
		Log: []delivery{
			{EventID: "a1", AggregateID: "A", Partition: 0, Offset: 0},
			{EventID: "a3", AggregateID: "A", Partition: 0, Offset: 1}, // before a2: violation
			{EventID: "a2", AggregateID: "A", Partition: 0, Offset: 2},
			{EventID: "a1", AggregateID: "A", Partition: 0, Offset: 3}, // redelivered tail
			{EventID: "b2", AggregateID: "B", Partition: 1, Offset: 0}, // same tx, recorded second
			{EventID: "b1", AggregateID: "B", Partition: 1, Offset: 1},
			{EventID: "c2", AggregateID: "C", Partition: 1, Offset: 2},
			{EventID: "c1", AggregateID: "C", Partition: 1, Offset: 3},
			{EventID: "ghost", AggregateID: "A", Partition: 0, Offset: 4},
		},
		Applied: []delivery{
			{EventID: "a1", Partition: -1, Offset: 1}, {EventID: "a2", Partition: -1, Offset: 2},
			{EventID: "a3", Partition: -1, Offset: 3}, {EventID: "a3", Partition: -1, Offset: 4},
			{EventID: "b1", Partition: -1, Offset: 5}, {EventID: "b2", Partition: -1, Offset: 6},
			{EventID: "c1", Partition: -1, Offset: 7}, {EventID: "c2", Partition: -1, Offset: 8},
		},
	}
	r := check(in)
	type summary struct {
		Committed, LogRecords, LogDuplicates, DupEffects int
		Lost, Ghosts, NotApplied                         []string
		Order, ConsumerOrder                             map[string]int
	}
	got := summary{r.Committed, r.LogRecords, r.LogDuplicates, r.DupEffects, r.Lost, r.Ghosts, r.NotApplied,
		r.Order.ByAggregate, r.ConsumerOrder.ByAggregate}
	want := summary{
		Committed: 9, LogRecords: 9, LogDuplicates: 1, DupEffects: 1,
		Lost: []string{"lost"}, Ghosts: []string{"ghost"}, NotApplied: []string{"ghost"},
		Order:         map[string]int{"A": 1, "B": 1},
		ConsumerOrder: map[string]int{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("check (-want +got):\n%s", diff)
	}
	if len(r.Order.Examples) != 2 || r.Order.Examples[0].Early != "a2" || r.Order.Examples[0].Late != "a3" {
		t.Errorf("order examples = %v, want a2 committed before a3 first", r.Order.Examples)
	}
	if f := r.failures(1); len(f) != 5 {
		t.Errorf("failures(1) = %q, want lost, ghosts, order, duplicate effects, not applied", f)
	}
}
