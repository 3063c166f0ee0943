// Command correctness is gooutbox's correctness suite: it proves, against
// real processes and a real database, that an event reaches the broker if
// and only if its transaction committed, in commit order per aggregate, and
// that the consumer applies it once.
//
// It writes through GORM on PostgreSQL with the hooks plugin (several
// writer goroutines; rollbacks by error, by panic and of savepoints;
// retries of rolled-back aggregates; Enqueue without row locks on hot
// aggregates; Create of slices; SkipDefaultTransaction; events recorded in
// a BeforeSave hook), and records a ledger row per event in the same
// transaction, plus each transaction's commit window on a monotonic clock.
// Relays and a consumer run as child processes (this binary, re-executed),
// the Kafka broker as a kfake process with a control channel for produce
// faults; the relays reach PostgreSQL through a fault proxy in the driving
// process (runtimetest.Proxy), under an application_name of the run. A
// fault schedule kills (SIGKILL) and pauses (SIGSTOP) relays, makes one
// partition reject produce requests, makes every partition reject them (a
// full broker outage), loses produce acks, holds a transaction open
// through a relay outage, commits a message larger than the broker
// accepts, freezes the relays' database connections half-open, refuses
// them, and terminates their backends. Then the checker reads the broker's
// raw log from offset 0 and the consumer's apply log and compares them
// with the ledger: lost, ghosts, order violations, duplicates.
//
//	go run ./adapters/harness/correctness                     # core tier, random seed
//	go run ./adapters/harness/correctness -seed 42            # replay a run
//	go run ./adapters/harness/correctness -scenario none -relays 2
//	go run ./adapters/harness/correctness -scenario longtx -relays 1 -paths enqueue
//	go run ./adapters/harness/correctness -matrix -q -duration 20s   # the presets below, one table
//	go run ./adapters/harness/correctness -db mysql           # the outbox on MySQL or MariaDB
//	go run ./adapters/harness/correctness -relay cdc          # CDC relays on a replication slot
//
// -scenario picks the faults (all, none, or a list of kill, stop,
// partition, ambiguous, longtx, poison, consumer, dbfreeze, dbrefuse,
// terminate, brokerdown, brokercut, freeze, netsplit, crash), -paths the write paths
// (all, save, enqueue), -relays the relay processes, so that each ordering
// problem can be shown on its own:
//
//	# several relays, no fault: a claim with a gap in one aggregate's events
//	# (also with -relays 2, in about one run of three)
//	go run ./adapters/harness/correctness -scenario none -relays 3 -paths save -batch 3 -pace 2ms -writers 8
//	# Enqueue without a row lock: published in id order, not commit order
//	go run ./adapters/harness/correctness -scenario none -relays 1 -paths enqueue
//	# the same, with a long transaction held open through a relay outage
//	go run ./adapters/harness/correctness -scenario longtx -relays 1 -paths enqueue
//	# a partial broker outage with MaxAttempts parks a healthy message;
//	# unparked, it arrives after its aggregate's later events
//	go run ./adapters/harness/correctness -scenario partition -relays 1 -paths save -max-attempts 1 -unpark
//	# every fault but the long transaction, one relay, saves only: passes today
//	go run ./adapters/harness/correctness -scenario kill,stop,partition,ambiguous,poison,consumer -relays 1 -paths save
//
// # Liveness
//
// Nine faults are measured: each commits, right after the fault began, one
// probe event on a fresh aggregate of every shard of the outbox (64, so
// whichever relay owns a shard, a probe waits on it), and the run fails
// unless every probe is marked published (which the relay does only after
// the broker acked it) within the fault's bound. The relays run with
// LeaseTTL 2s (renewed every 400ms), PollInterval 200ms, MaxBackoff 1s,
// RetryDelay 100ms, a 1s kafka-go write timeout and StoreTimeout 2s
// (relay.Config; 10s by default), so that recovery is quick; the bounds
// are made of these settings plus 1s for the suite's own polling on a
// shared machine, plus the control probe's time: right before each
// measured fault (once no other fault runs), the suite commits one more
// probe and times its publication, and adds that time to the fault's
// bound. On a quiet machine it is a few hundred milliseconds; on a loaded
// one (CI runs other race-instrumented test packages beside the suite) it
// grows, and the bounds with it, while what they test stays: a fault may
// delay publication by what the settings allow, not more. The bounds,
// before the control probe's time:
//
//	stop        SIGSTOP one relay for 5-6 s; from the SIGSTOP:
//	            LeaseTTL + LeaseTTL/5 + PollInterval + 1s = 3.6s (another
//	            relay takes the stopped relay's shards; at least one shard
//	            must change owner, or the fault proved nothing). With one
//	            relay, from the SIGCONT: MaxBackoff + StoreTimeout +
//	            PollInterval + 1s = 4.2s.
//	dbfreeze    every open relay connection turns half-open (no RST); from
//	            the fault: 3×StoreTimeout + LeaseTTL + 1s = 9s.
//	dbrefuse    the relays' connections are closed and new ones refused
//	            for 2-3 s; from the heal: MaxBackoff + StoreTimeout +
//	            PollInterval + 1s = 4.2s.
//	terminate   pg_terminate_backend of every relay backend; from the
//	            fault: 2×MaxBackoff + PollInterval + 1s = 3.2s (each of a
//	            relay's 4 pooled connections may fail one call, and the
//	            backoffs after them add up to 750ms).
//	brokerdown  every partition answers NOT_ENOUGH_REPLICAS for 2-3 s;
//	            from the heal: MaxBackoff + RetryDelay + PollInterval +
//	            write timeout + 1s = 3.3s. No message committed during the
//	            outage may count an attempt for it (attempts = 0 on those
//	            whose last_error is the outage's).
//	brokercut   every byte between the relay holding the shards and the
//	            broker is held for 5-6 s (its own proxy; its database
//	            stays reachable, so its leases never expire); from the
//	            fault: HandOverAfter + MaxBackoff + a standby's look
//	            (250ms) + PollInterval + 1s = 4.45s. With several relays,
//	            some shards must change owner. The held bytes are
//	            delivered at the end: the produce requests the relay gave
//	            up on reach the broker late, as duplicates.
//	freeze      SIGSTOP the relay holding the shards right after its
//	            proxy forwarded one of its produce requests, with that
//	            proxy holding each produce answer 100 ms (a slow broker),
//	            so that it stops inside a publish; SIGCONT after 3-4
//	            LeaseTTLs (6-8 s). From the SIGSTOP: LeaseTTL +
//	            LeaseTTL/5 + a standby's look + PollInterval + 1s = 3.85s.
//	            Stale records are checked (see Fencing).
//	netsplit    the broker link of the relay holding the shards is
//	            blackholed right after it forwarded a produce request, for
//	            3-4 LeaseTTLs, then healed (a network partition; named so
//	            because partition is the Kafka-partition fault). Nothing
//	            goes either way while split; what the relay wrote on an
//	            open connection is delivered at the heal (retransmitted),
//	            also after a graceful close, but not after a reset
//	            (SO_LINGER 0 discards the send queue); a connection opened
//	            during the split reaches the broker only if still open at
//	            the heal. Its database stays reachable, so it hands over:
//	            from the split, as brokercut, 4.45s. Stale records are
//	            checked.
//	crash       SIGKILL the relay holding the shards right after it
//	            renewed its leases (the suite watches their expires_at);
//	            from the kill: crashTakeover (1s: the database ends the
//	            dead relay's session and a standby takes its shards) +
//	            PollInterval + 500ms = 1.7s, on MySQL too (one relay:
//	            restarted at once, + 500ms to start). The margin is half
//	            the others' so that a takeover that waits for the leases
//	            to expire (about 2.4s with LeaseTTL 2s) fails it.
//
// # Fencing
//
// A relay that lost its shards (frozen, split) must never have a write
// reach the broker after its successor's first write of the same
// aggregate (invariant 10). Each relay reaches the broker through a
// Kafka-aware proxy of its own, which reads every produce response's base
// offset and so knows which relay wrote each record of the log (the
// records are not touched: consumers cannot tell relays apart). For the
// window from the fault to its settle after the heal, a record of
// aggregate K that the fenced relay wrote after the first record of K
// another relay wrote in the window is late; it is stale when an earlier
// record of K is of an event that committed after it (ledger order, as
// the order check's): a reader of the log sees K's older event after a
// newer one. The run fails on any stale record; the summary also prints
// the late ones (a late duplicate of the successor's last event is not
// stale) and how many log records no proxy attributed.
//
// The summary prints each measured fault's recovery time next to its
// bound. The measured faults and the long transaction's relay outage run
// one at a time, in an order drawn from the seed; the kills, ambiguous
// writes, the one-partition outage and the poison message never overlap
// them (a kill or ambiguous write waits up to 5 s for a measured fault to
// end, then is skipped, and counted as such), so each bound is measured
// against its own fault.
//
// The ordering problems depend on how processes interleave, which a seed
// does not fix: the seed replays the writers' choices and the fault
// schedule, not the scheduling of the processes.
//
// The checker counts as an order violation every pair of events of one
// aggregate whose commit order is known (same transaction: recording order;
// two transactions: the first's Commit returned before the second's was
// called, on the writer's monotonic clock) and whose first deliveries are
// the other way round. Log duplicates are bounded by two relay batches
// per relay kill or stop (a busy relay marks one batch while it publishes
// the next), by one per produce request the broker rejected (one
// partition down) or wrote late, and by two per relay for each database
// fault (a batch published whose mark failed, and the one published beside
// it); requests refused in a full outage add none, since nothing was
// written.
//
// The suite is a package of the harness module (adapters/harness), built
// in the repository's workspace against the working trees of the modules
// whose public API it uses (hooks, runtime/relay, runtime/consumer,
// adapters/kafka, runtime/sqlstore/pgcdc), so that every change of that
// API must keep it compiling; no user's program requires it. Its go test
// entry point, TestCorrectness, is the core tier (OUTBOX_CORRECTNESS_LONG=1
// for the long one; OUTBOX_CORRECTNESS_SEED, _SCENARIO, _PATHS, _RELAYS
// and _RELAY as the flags).
//
// The writers pause between transactions (-pace) and wait while more than
// -max-backlog messages are pending (by default 30 batches, at least
// 200): where the relays publish more slowly than the writers commit (one
// active relay of race-instrumented processes beside other test binaries),
// an unbounded backlog would put every control probe behind it, and the
// measured faults would time the backlog, not the recovery. The probes
// and the faults' own transactions never wait; the summary prints how long
// the writers did. OUTBOX_CORRECTNESS_LOG_LEVEL=debug logs every batch of
// the relays.
//
// Every run prints its seed; the writers' choices and the fault schedule
// derive from it. PostgreSQL comes from -database-url (default
// $OUTBOX_TEST_POSTGRES_DSN or the local test database); each run uses a
// fresh schema.
//
// # CDC relays
//
// With -relay cdc the relays are CDC relays (pgcdc, Table mode) on one
// logical replication slot of the run, created before the writers start
// and dropped at the end whatever the outcome: one relay streams, the
// others stand by, and the holder of the slot (pg_replication_slots'
// active_pid, named by its application_name) stands for the holder of the
// shards. They run with SenderTimeout 3s (so a status every 1s, a
// silent stream taken for dead after 2s, a lease of 1.5s), RetryDelay
// 100ms, MaxRetryDelay 1s and StatementTimeout 2s; a standby tries the
// slot every second, and the probes wait for the marker's published_at
// (every 200ms). The bounds (cdc.go), before the control probe's time,
// each ending with a claim, a marker pass and the 1s of slack:
//
//	stop, freeze   several relays, from the SIGSTOP: the server ends the
//	               silent stream (SenderTimeout, looked at every half of
//	               it) + a standby's try = 6.9s; one relay, from the
//	               SIGCONT: MaxRetryDelay + MaxBackoff = 3.4s.
//	crash          a standby's try (the server ends a dead relay's
//	               stream at once) + its relay's next claim (100ms) +
//	               a marker statement (StatementTimeout) = 4.5s; one
//	               relay: its restart.
//	terminate      a standby's try + MaxBackoff = 3.4s, from the fault.
//	dbrefuse       MaxRetryDelay + a standby's try + MaxBackoff = 4.4s,
//	               from the heal.
//	dbfreeze       the server ends the stream (4.5s) + a standby's try +
//	               the marker's frozen statement (StatementTimeout) =
//	               8.9s, from the fault.
//	brokerdown,    a CDC relay keeps its slot while its broker fails:
//	brokercut,     MaxRetryDelay + MaxBackoff + the write timeout = 4.4s,
//	netsplit       from the heal.
//
// The duplicates' bound adds, per stream ended, half a second of events
// at the run's mean rate (cdcTailBound): the next stream repeats the
// slot's unconfirmed tail. TestCorrectnessCDC is the core tier with CDC
// relays.
//
// # MySQL and MariaDB
//
// With -db mysql the accounts, the ledger, the outbox and the relays are on
// MySQL 8 or MariaDB (-mysql-dsn, default $OUTBOX_TEST_MYSQL_DSN or
// root@tcp(127.0.0.1:3306)/; each run creates a fresh database), and so are
// every fault on the relays' connections; terminate becomes KILL
// CONNECTION of the sessions that came through the fault proxy (MySQL has
// no application_name). The consumer's inbox and apply log stay on a
// PostgreSQL schema of their own, since the inbox has no MySQL SQL yet; the
// consumer's side is not what -db tests. TestCorrectnessMySQL is the core
// tier on MySQL. The database-specific code is in database_postgres.go and
// database_mysql.go, behind suiteDB.
//
// On MySQL, when dbfreeze catches a relay inside its lease transaction,
// the server ends that session after the lease transaction's wait_timeout
// (hooks sets it, and innodb_lock_wait_timeout, to LeaseTTL/2 for that
// transaction), releasing the lease rows; go-sql-driver's Commit and
// Rollback have no deadline of their own on a half-open connection, so the
// relays' DSN sets readTimeout and writeTimeout to the relays'
// StoreTimeout, as the README asks (without them, a relay frozen in its
// COMMIT stayed stuck 16 s, and one whose own frozen renewal held its row
// waited on the lock, failing the dbfreeze bound).
//
// The exit status is 1 when a check fails; the processes' logs
// and the violating ids are then kept in the directory printed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gooutbox/outbox/hooks/hookstest"
)

func main() {
	if role := roleFromEnv(); role != "" {
		os.Exit(runRole(role, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the suite and prints the table; it returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opt, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "correctness:", err)
		return 2
	}
	if opt.Matrix {
		return runMatrix(ctx, opt, stdout)
	}
	fmt.Fprintf(stdout, "correctness: seed %d (replay with -seed %d), db %s, scenario %s, paths %s, %d %s relays, batch %d, %v load\n",
		opt.Seed, opt.Seed, opt.DB, scenarioName(opt.Faults), pathsName(opt.Paths), opt.Relays, opt.Relay, opt.BatchSize, opt.Duration)
	res, err := runSuite(ctx, opt)
	if err != nil {
		fmt.Fprintln(stderr, "correctness:", err)
		return 1
	}
	report(stdout, res)
	if !res.passed() {
		return 1
	}
	return 0
}

// runMatrix runs every preset of matrix (seeds opt.Seed, opt.Seed+1, ...)
// and prints one table of them all, then each run's failures.
func runMatrix(ctx context.Context, opt options, stdout io.Writer) int {
	var results []*result
	status := 0
	for i, p := range matrix(opt) {
		p.Seed = opt.Seed + int64(i)
		fmt.Fprintf(stdout, "correctness: %s: seed %d\n", p.Name, p.Seed)
		res, err := runSuite(ctx, p)
		if err != nil {
			fmt.Fprintf(stdout, "correctness: %s: %v\n", p.Name, err)
			return 1
		}
		results = append(results, res)
		if !res.passed() {
			status = 1
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, results)
	for _, res := range results {
		fmt.Fprintln(stdout)
		printSummary(stdout, res)
		if !res.passed() {
			printDetails(stdout, res, 3)
			fmt.Fprintf(stdout, "logs and violations kept in %s; schema %s kept\n", res.Dir, res.Schema)
		}
	}
	return status
}

// matrix returns the presets -matrix runs: the core tier, two runs that
// must pass today (one relay, saves only, with and without faults), and
// one run per ordering problem, each on its own.
func matrix(base options) []options {
	preset := func(name, scenario, paths string, relays int, f func(*options)) options {
		o := base
		o.Name, o.Relays = name, relays
		o.Faults, _ = parseScenario(scenario)
		o.Paths, _ = parsePaths(paths)
		if f != nil {
			f(&o)
		}
		return o
	}
	return []options{
		preset("core", "all", "all", 3, nil),
		preset("baseline", "none", "save", 1, nil),
		preset("faults-one-relay", "kill,stop,partition,ambiguous,poison,consumer", "save", 1, nil),
		preset("several-relays", "none", "save", 3, func(o *options) {
			o.BatchSize, o.Pace, o.Writers = 3, 2*time.Millisecond, 8
		}),
		preset("enqueue", "none", "enqueue", 1, nil),
		preset("enqueue-longtx", "longtx", "enqueue", 1, nil),
		preset("partition-max-attempts", "partition", "save", 1, func(o *options) { o.MaxAttempts, o.Unpark = 1, true }),
		preset("cdc", "all", "all", 3, func(o *options) { o.Relay = relayCDC }),
	}
}

// report prints a run's table, summary and failures.
func report(w io.Writer, res *result) {
	fmt.Fprintln(w)
	printTable(w, []*result{res})
	fmt.Fprintln(w)
	printSummary(w, res)
	if !res.passed() {
		fmt.Fprintln(w)
		printDetails(w, res, 10)
		fmt.Fprintf(w, "\nlogs and violations kept in %s; schema %s kept\n", res.Dir, res.Schema)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	opt := defaultOptions()
	fs := flag.NewFlagSet("correctness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Int64("seed", 0, "seed of the workload and the fault schedule (default: from the clock)")
	scenario := fs.String("scenario", "all", "faults to inject: all, none, or a comma-separated list of "+fmt.Sprint(allFaults()))
	fs.DurationVar(&opt.Duration, "duration", opt.Duration, "load phase; every fault happens within it")
	fs.DurationVar(&opt.Drain, "drain", opt.Drain, "bound on draining the outbox and the consumer after the last fault")
	fs.IntVar(&opt.Relays, "relays", opt.Relays, "relay processes")
	fs.IntVar(&opt.Writers, "writers", opt.Writers, "writer goroutines")
	fs.IntVar(&opt.Hot, "hot", opt.Hot, "hot aggregates that every writer enqueues to")
	fs.IntVar(&opt.BatchSize, "batch", opt.BatchSize, "relay batch size")
	fs.IntVar(&opt.MaxBacklog, "max-backlog", opt.MaxBacklog, "pending messages above which the writers wait for the relays (0: 30 batches, at least 200)")
	fs.IntVar(&opt.MaxAttempts, "max-attempts", opt.MaxAttempts, "sqlstore.StoreConfig.MaxAttempts of the relays (0: never park transient failures)")
	fs.IntVar(&opt.MaxActiveRelays, "max-active-relays", opt.MaxActiveRelays, "sqlstore.StoreConfig.MaxActiveRelays of the relays (0: its default, 1: one publishes, the others stand by; 64: every relay takes a share)")
	fs.DurationVar(&opt.Pace, "pace", opt.Pace, "mean pause of a writer between transactions")
	fs.StringVar(&opt.Relay, "relay", opt.Relay, "the relays: poll (sqlstore, leases on shards) or cdc (pgcdc: one logical replication slot, one relay streaming, the others standing by; PostgreSQL with wal_level = logical)")
	fs.StringVar(&opt.DB, "db", "postgres", "the outbox's database: postgres, or mysql (MySQL 8 or MariaDB; the consumer's inbox stays on PostgreSQL)")
	fs.StringVar(&opt.BaseDSN, "database-url", hookstest.PostgresBaseDSN(), "PostgreSQL; each run creates a fresh schema in it (with -db mysql, the consumer's)")
	fs.StringVar(&opt.MySQLDSN, "mysql-dsn", hookstest.MySQLBaseDSN(), "MySQL or MariaDB for -db mysql (go-sql-driver DSN); each run creates a fresh database on it")
	fs.BoolVar(&opt.Keep, "keep", false, "keep the schema and the logs even when the run passes")
	paths := fs.String("paths", "all", "write paths of the writers: all, save (aggregate saves only) or enqueue (Enqueue on hot aggregates only)")
	fs.BoolVar(&opt.Unpark, "unpark", false, "after draining, unpark the healthy parked messages (what an operator does) and drain again")
	fs.BoolVar(&opt.Matrix, "matrix", false, "run the core tier and one run per ordering problem (seeds -seed, -seed+1, ...) and print one table")
	quiet := fs.Bool("q", false, "do not print progress")
	if err := fs.Parse(args); err != nil {
		return opt, err
	}
	if _, err := databaseOf(opt.DB); err != nil {
		return opt, err
	}
	if err := opt.checkRelay(); err != nil {
		return opt, err
	}
	faults, err := parseScenario(*scenario)
	if err != nil {
		return opt, err
	}
	opt.Faults = faults
	if opt.Paths, err = parsePaths(*paths); err != nil {
		return opt, err
	}
	opt.Seed = *seed
	if opt.Seed == 0 {
		opt.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	if !*quiet {
		opt.Verbose = stderr
	}
	if opt.Relays < 1 || opt.Writers < 1 || opt.Hot < 1 || opt.BatchSize < 1 {
		return opt, errors.New("-relays, -writers, -hot and -batch must be at least 1")
	}
	return opt, nil
}
