package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// options configure one run of the suite.
type options struct {
	Name        string // of a -matrix preset
	Seed        int64
	Duration    time.Duration // load phase; the faults happen within it
	Drain       time.Duration // bound on draining after the last fault
	Relays      int
	Writers     int
	Hot         int // hot aggregates, enqueued to by every writer
	BatchSize   int
	MaxAttempts int // sqlstore.StoreConfig.MaxAttempts of the relays
	// MaxActiveRelays is sqlstore.StoreConfig.MaxActiveRelays of the
	// relays (0: its default, one active relay).
	MaxActiveRelays int
	Partitions      int
	Pace            time.Duration // mean pause of a writer between transactions
	// MaxBacklog is the pending messages above which the writers wait for
	// the relays (0: 30 batches, at least 200; see workload.watchBacklog).
	MaxBacklog int
	Faults     map[string]bool
	Paths      map[string]bool // write paths of the writers
	DB         string          // the outbox's database: "postgres" (default) or "mysql"
	Relay      string          // the relays' kind: relayPoll (default) or relayCDC
	BaseDSN    string          // PostgreSQL; a fresh schema is created in it (the consumer's in every case)
	MySQLDSN   string          // MySQL or MariaDB with -db mysql; a fresh database is created on it
	Keep       bool            // keep the schema and the logs even when the run passes
	Matrix     bool            // run the presets of matrix instead
	Unpark     bool            // act as an operator: unpark healthy parked messages while draining
	Verbose    io.Writer
}

// defaultOptions are the core tier's settings.
func defaultOptions() options {
	faults, _ := parseScenario("all")
	paths, _ := parsePaths("all")
	return options{Name: "run", Paths: paths, Relay: relayPoll,
		Duration: 45 * time.Second, Drain: 45 * time.Second,
		Relays: 3, Writers: 6, Hot: 3, BatchSize: 10, Partitions: 4,
		Pace: 15 * time.Millisecond, Faults: faults,
	}
}

// maxBacklog returns MaxBacklog, or its default.
func (o options) maxBacklog() int {
	if o.MaxBacklog > 0 {
		return o.MaxBacklog
	}
	return max(200, 30*o.BatchSize)
}

// Fixed settings of the broker and the relays.
const (
	maxMessageBytes = 128 << 10 // the broker's message.max.bytes
	writeTimeout    = time.Second
)

// result is the outcome of one run.
type result struct {
	Seed      int64
	Opts      options
	Report    checkReport
	Faults    faultCounts
	Workload  workloadStats
	Parked    int64 // the outbox's parked messages at the end
	Unparked  int64 // healthy parked messages put back (-unpark)
	Discarded int64 // parked poison messages discarded, as an operator does
	Poison    int   // poison events committed
	DupBound  int
	Wall      time.Duration
	Failures  []string
	Dir       string // logs of the processes (kept on failure)
	Schema    string // the run's schema, or database and consumer's schema
	// Liveness are the measured faults' recovery times and bounds.
	Liveness []livenessResult
	// Fences are the stale-record checks of freeze and netsplit;
	// Unattributed counts the log's records that no relay's proxy saw
	// placed (see checkFences).
	Fences       []fenceResult
	Unattributed int
}

// passed reports whether the run found nothing wrong.
func (r *result) passed() bool { return len(r.Failures) == 0 }

// errUnavailable wraps the error of a database that does not answer, so
// the test can skip.
var errUnavailable = errors.New("database unavailable")

// runSuite runs the suite once: it starts the broker, the consumer and the
// relays as processes, runs the writers and the fault schedule, waits for
// the outbox to drain, and checks the ledger against the broker's log and
// the apply log. Progress goes to opt.Verbose.
func runSuite(ctx context.Context, opt options) (res *result, err error) {
	t0 := time.Now()
	var logMu sync.Mutex // fault goroutines log concurrently
	logf := func(format string, args ...any) {
		if opt.Verbose != nil {
			logMu.Lock()
			defer logMu.Unlock()
			fmt.Fprintf(opt.Verbose, format+"\n", args...)
		}
	}
	res = &result{Seed: opt.Seed, Opts: opt}

	// A fresh schema (or database) for this run; with -db mysql the
	// consumer gets a PostgreSQL schema of its own.
	sdb, err := databaseOf(opt.DB)
	if err != nil {
		return nil, err
	}
	schema, err := randomName("correctness_")
	if err != nil {
		return nil, err
	}
	base := opt.BaseDSN
	if sdb.name() == "mysql" {
		base = opt.MySQLDSN
	}
	dsn, drop, err := sdb.create(ctx, base, schema)
	if err != nil {
		return nil, err
	}
	res.Schema = schema
	consumerDSN := dsn
	if sdb.name() != "postgres" {
		cdsn, cdrop, err := postgresDB{}.create(ctx, opt.BaseDSN, schema+"_consumer")
		if err != nil {
			return nil, errors.Join(err, drop())
		}
		consumerDSN, res.Schema = cdsn, fmt.Sprintf("%s (%s database) and %s_consumer (PostgreSQL)", schema, sdb.name(), schema)
		odrop := drop
		drop = func() error { return errors.Join(odrop(), cdrop()) }
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("outbox-correctness-seed%d-", opt.Seed))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("log dir: %w", err), drop())
	}
	res.Dir = dir
	defer func() {
		switch {
		case err != nil:
			// Keep what there is for a look at what went wrong.
			res, err = nil, fmt.Errorf("seed %d: %w (logs in %s, schema %s kept)", opt.Seed, err, dir, schema)
		case res.passed() && !opt.Keep:
			err = errors.Join(drop(), os.RemoveAll(dir))
		}
	}()
	db, err := gorm.Open(sdb.dialector(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("database handle: %w", err)
	}
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(opt.Writers + 6)
	cdb := db
	if consumerDSN != dsn {
		if cdb, err = gorm.Open(postgres.Open(consumerDSN), &gorm.Config{Logger: logger.Discard}); err != nil {
			return nil, fmt.Errorf("open the consumer's database: %w", err)
		}
		csqlDB, err := cdb.DB()
		if err != nil {
			return nil, fmt.Errorf("database handle: %w", err)
		}
		defer csqlDB.Close()
	}
	if err := db.AutoMigrate(&Account{}); err != nil {
		return nil, fmt.Errorf("migrate accounts: %w", err)
	}
	for _, stmt := range sdb.ledgerDDL() {
		if err := db.Exec(stmt).Error; err != nil {
			return nil, fmt.Errorf("create suite tables: %w", err)
		}
	}
	for _, stmt := range applyLogDDL() {
		if err := cdb.Exec(stmt).Error; err != nil {
			return nil, fmt.Errorf("create the apply log: %w", err)
		}
	}
	if err := setupInbox(ctx, cdb); err != nil {
		return nil, err
	}
	ob, err := setupOutbox(ctx, db, sdb)
	if err != nil {
		return nil, err
	}
	defer ob.close()
	var slot string
	if opt.Relay == relayCDC {
		// The slot before the writers: it streams what commits after it.
		slot = cdcSlot(schema)
		dropSlot, err := setupCDC(ctx, dsn, slot)
		if err != nil {
			return nil, err
		}
		// Deferred before the processes' stop, so run after it.
		defer func() {
			if derr := dropSlot(); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop the run's slot %s: %w", slot, derr))
			}
		}()
	}

	// The relays reach the database through a fault proxy, under an
	// application_name of this run's own on PostgreSQL.
	relayApp := "relay_" + schema
	proxy, relayDSN, stopProxy, err := startDBProxy(sdb, dsn, relayApp)
	if err != nil {
		return nil, err
	}
	defer stopProxy()

	// Processes: the broker, the consumer, the relays.
	sup, err := newSupervisor(dir)
	if err != nil {
		return nil, err
	}
	defer sup.stopAll()
	kport, err := freePort()
	if err != nil {
		return nil, err
	}
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	brokers := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(kport))}
	cfg := childConfig{
		DB: sdb.name(), DSN: consumerDSN, Brokers: brokers, BrokerPort: kport,
		ControlAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(cport)),
		Partitions:  opt.Partitions, MaxMessageBytes: maxMessageBytes,
		BatchSize: opt.BatchSize, MaxAttempts: opt.MaxAttempts, MaxActiveRelays: opt.MaxActiveRelays,
		WriteTimeout: writeTimeout,
		StoreTimeout: relayStoreTimeout,
		Relay:        opt.Relay, Slot: slot,
	}
	relayCfg := cfg
	relayCfg.DSN = relayDSN
	control := "http://" + cfg.ControlAddr
	brokerProc, err := sup.start("broker", roleBroker, cfg)
	if err != nil {
		return nil, err
	}
	if err := waitBroker(ctx, control, 20*time.Second); err != nil {
		return nil, err
	}
	consumerProc, err := sup.start("consumer", roleConsumer, cfg)
	if err != nil {
		return nil, err
	}
	// Each relay reaches the broker through a fault proxy of its own, so
	// that one relay alone can be cut off from it.
	brokerProxies, stopBrokerProxies, err := startBrokerProxies(opt.Relays, brokers[0])
	if err != nil {
		return nil, err
	}
	defer stopBrokerProxies()
	var relays []*proc
	for i := range opt.Relays {
		rc := relayCfg
		rc.BrokerVia = brokerProxies[i].Addr()
		p, err := sup.start(fmt.Sprintf("relay-%d", i), roleRelay, rc)
		if err != nil {
			return nil, err
		}
		relays = append(relays, p)
	}
	logf("seed %d: schema %s, broker %s, logs in %s", opt.Seed, schema, brokers[0], dir)

	// Load and faults.
	wl := newWorkload(db, sdb, ob, opt.Seed, opt.Pace, opt.Hot, opt.Paths, opt.maxBacklog())
	env := &faultEnv{relays: relays, consumer: consumerProc, control: control, workload: wl,
		db: db, ob: ob, proxy: proxy, brokerProxies: brokerProxies, relayApp: relayApp, kind: opt.Relay, slot: slot, excl: make(chan struct{}, 1),
		partitions: opt.Partitions, writeTO: writeTimeout, maxMsg: maxMessageBytes, logf: logf}
	faultRNG := rand.New(rand.NewPCG(uint64(opt.Seed), 0xfa17))
	plan := env.plan(faultRNG, opt.Faults, opt.Duration)
	loadCtx, stopLoad := context.WithTimeout(ctx, opt.Duration)
	defer stopLoad()
	start := time.Now()
	env.start = start
	var wg sync.WaitGroup
	wg.Go(func() { wl.watchBacklog(loadCtx) })
	for i := range opt.Writers {
		wr := &writer{w: wl, id: i, rng: rand.New(rand.NewPCG(uint64(opt.Seed), uint64(i+1)))}
		wg.Go(func() { wr.run(loadCtx) })
	}
	wg.Go(func() { env.run(ctx, start, plan, logf) })
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	lastFault := time.Now()
	logf("%6.2fs load done; every fault healed", time.Since(start).Seconds())
	for _, p := range relays {
		if err := errors.Join(p.signal(syscall.SIGCONT), p.restart()); err != nil {
			return nil, err
		}
	}
	if err := consumerProc.restart(); err != nil {
		return nil, err
	}

	// Persist the commit windows, then wait for the outbox to drain and the
	// consumer to apply everything on the broker.
	commits, poison, wstats := wl.snapshot()
	res.Workload, res.Poison = wstats, len(poison)
	if err := saveCommits(ctx, db, commits); err != nil {
		return nil, err
	}
	deadline := lastFault.Add(opt.Drain)
	drain := func() outboxStats {
		st, perr := pollUntil(ctx, deadline, func() (bool, outboxStats, error) {
			s, err := ob.stats(ctx)
			if err == nil && s.Parked > 0 && len(poison) > 0 {
				// The operator's part: a parked poison message holds its
				// aggregate's later events back until it is discarded.
				n, derr := ob.discard(ctx, db, poison)
				if derr != nil {
					return false, s, derr
				}
				if n > 0 {
					res.Discarded += n
					logf("%6.2fs discarded %d parked poison message(s)", time.Since(start).Seconds(), n)
					s, err = ob.stats(ctx)
				}
			}
			if err == nil && opt.Unpark && s.Parked > 0 {
				// The operator's part once the partition is back: put the
				// healthy parked messages back in the queue; their
				// aggregates' later events waited behind them.
				n, uerr := ob.unpark(ctx, db, poison)
				if uerr != nil {
					return false, s, uerr
				}
				if n > 0 {
					res.Unparked += n
					logf("%6.2fs unparked %d healthy messages", time.Since(start).Seconds(), n)
					s, err = ob.stats(ctx)
				}
			}
			return err == nil && s.Pending == 0, s, err
		})
		if perr != nil {
			res.Failures = append(res.Failures, fmt.Sprintf("outbox did not drain within %v after the last fault: %d pending, %d parked (%v)", opt.Drain, st.Pending, st.Parked, perr))
		} else {
			logf("%6.2fs outbox drained (%d parked)", time.Since(start).Seconds(), st.Parked)
		}
		return st
	}
	st := drain()
	res.Parked = st.Parked
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	log, err := readRawLog(rctx, brokers, opt.Partitions)
	cancel()
	if err != nil {
		return nil, err
	}
	logIDs := map[string]bool{}
	for _, d := range log {
		logIDs[d.EventID] = true
	}
	var applied []delivery
	left, perr := pollUntil(ctx, deadline, func() (bool, int, error) {
		var lerr error
		applied, lerr = loadApplied(ctx, cdb)
		for _, d := range applied {
			delete(logIDs, d.EventID) // what is left was never applied
		}
		return lerr == nil && len(logIDs) == 0, len(logIDs), lerr
	})
	if perr != nil {
		res.Failures = append(res.Failures, fmt.Sprintf("consumer did not apply every event on the broker within %v after the last fault: %d left (%v)", opt.Drain, left, perr))
	} else {
		logf("%6.2fs consumer caught up", time.Since(start).Seconds())
	}

	// Check.
	ledger, err := loadLedger(ctx, db, sdb)
	if err != nil {
		return nil, err
	}
	saved, err := loadCommits(ctx, db)
	if err != nil {
		return nil, err
	}
	in := checkInput{Ledger: ledger, Commits: saved, Poison: poison, Log: log, Applied: applied}
	res.Report = check(in)
	bstats, err := brokerStatsOf(ctx, control)
	if err != nil {
		return nil, err
	}
	env.mu.Lock()
	res.Faults = env.counts
	res.Liveness = env.liveness
	fences := env.fences
	env.mu.Unlock()
	res.Fences, res.Unattributed = checkFences(fences, log, brokerProxies, in)
	res.Faults.Rejected, res.Faults.Refused, res.Faults.Delayed = bstats.Rejected, bstats.Refused, bstats.Delayed
	// Each relay kill or stop may make the two batches in flight go out
	// twice (a busy relay marks one while it publishes the next), each
	// database fault the same per relay (a mark that failed, and the batch
	// published beside it, left unmarked so that both go out again in
	// order), and each produce request rejected or written late one batch.
	// A produce request refused in a full outage adds none: nothing was
	// written. A relay cut off from the broker writes its last two
	// batches up to three times each (kafka-go's attempts), all delivered
	// late when the cut heals. A relay frozen or split mid-publish
	// may do the same (its kafka-go writer retries its last two batches
	// after the SIGCONT or the heal), and a crash is a kill.
	res.DupBound = opt.BatchSize * (2*(res.Faults.Kills+res.Faults.Stops) + res.Faults.Outages*opt.Relays +
		int(res.Faults.Rejected) + int(res.Faults.Delayed) + 2*res.Faults.dbFaults()*opt.Relays + 6*res.Faults.BrokerCuts +
		6*(res.Faults.Freezes+res.Faults.Netsplits) + 2*res.Faults.Crashes)
	if opt.Relay == relayCDC {
		res.DupBound += cdcTailBound(len(ledger), opt, res.Faults)
	}
	res.Failures = append(res.Failures, res.Report.failures(res.DupBound)...)
	if res.Poison > 0 && res.Parked+res.Discarded < int64(res.Poison) {
		res.Failures = append(res.Failures, fmt.Sprintf("%d poison events committed but %d messages parked", res.Poison, res.Parked+res.Discarded))
	}
	// Only a permanent failure parks while MaxAttempts is 0; with
	// MaxAttempts set, parking healthy messages during a partition outage is
	// the configured policy (they hold their aggregates, and -unpark puts
	// them back in order).
	if extra := res.Parked + res.Discarded - int64(res.Poison) + res.Unparked; extra > 0 && opt.MaxAttempts == 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d healthy messages parked (not poison; %d unparked at the end)", extra, res.Unparked))
	}
	for _, l := range res.Liveness {
		if f := l.failure(); f != "" {
			res.Failures = append(res.Failures, "liveness: "+f)
		}
	}
	for _, f := range res.Fences {
		if msg := f.failure(); msg != "" {
			res.Failures = append(res.Failures, "fencing: "+msg)
		}
	}
	for _, e := range res.Faults.Errors {
		res.Failures = append(res.Failures, "fault injection failed: "+e)
	}
	if wstats.Unexpected > 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d writer transactions failed unexpectedly, last: %s", wstats.Unexpected, wstats.LastError))
	}
	for _, p := range append([]*proc{brokerProc, consumerProc}, relays...) {
		if n := p.unexpectedExits(); n > 0 {
			res.Failures = append(res.Failures, fmt.Sprintf("%s exited %d times on its own (see %s.log)", p.name, n, p.name))
		}
	}
	res.Wall = time.Since(t0)
	if !res.passed() {
		if err := writeViolations(filepath.Join(dir, "violations.txt"), res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// pollUntil calls f until it reports done or the deadline passes; it
// returns f's last value, and an error when the deadline passed.
func pollUntil[T any](ctx context.Context, deadline time.Time, f func() (bool, T, error)) (T, error) {
	for {
		done, v, err := f()
		if done {
			return v, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("deadline passed, last state %+v", v)
			}
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitBroker polls the broker's control channel until it answers.
func waitBroker(ctx context.Context, control string, within time.Duration) error {
	_, err := pollUntil(ctx, time.Now().Add(within), func() (bool, brokerStats, error) {
		s, err := brokerStatsOf(ctx, control)
		return err == nil, s, err
	})
	if err != nil {
		return fmt.Errorf("broker did not start within %v (see broker.log): %w", within, err)
	}
	return nil
}

func brokerStatsOf(ctx context.Context, control string) (brokerStats, error) {
	var s brokerStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, control+"/stats", nil)
	if err != nil {
		return s, fmt.Errorf("broker stats: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("broker stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("broker stats: %w", err)
	}
	return s, nil
}

// saveCommits persists the commit windows in cs_commits.
func saveCommits(ctx context.Context, db *gorm.DB, commits map[int64]commitWindow) error {
	type row struct {
		TxID     int64 `gorm:"column:tx_id"`
		Writer   int
		BeforeNs int64 `gorm:"column:before_ns"`
		AfterNs  int64 `gorm:"column:after_ns"`
	}
	rows := make([]row, 0, len(commits))
	for id, c := range commits {
		rows = append(rows, row{TxID: id, BeforeNs: c.Before, AfterNs: c.After})
	}
	if len(rows) == 0 {
		return nil
	}
	if err := db.WithContext(ctx).Table("cs_commits").CreateInBatches(rows, 1000).Error; err != nil {
		return fmt.Errorf("save commit windows: %w", err)
	}
	return nil
}

func loadCommits(ctx context.Context, db *gorm.DB) (map[int64]commitWindow, error) {
	rows, err := db.WithContext(ctx).Raw(`SELECT tx_id, before_ns, after_ns FROM cs_commits`).Rows()
	if err != nil {
		return nil, fmt.Errorf("load commit windows: %w", err)
	}
	defer rows.Close()
	out := map[int64]commitWindow{}
	for rows.Next() {
		var id int64
		var c commitWindow
		if err := rows.Scan(&id, &c.Before, &c.After); err != nil {
			return nil, fmt.Errorf("load commit windows: %w", err)
		}
		out[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load commit windows: %w", err)
	}
	return out, nil
}

func loadLedger(ctx context.Context, db *gorm.DB, sdb suiteDB) (map[string]ledgerEvent, error) {
	rows, err := db.WithContext(ctx).Raw(`SELECT ` + sdb.uuidText("event_id") + `, aggregate_id, tx_id, seq FROM cs_ledger`).Rows()
	if err != nil {
		return nil, fmt.Errorf("load ledger: %w", err)
	}
	defer rows.Close()
	out := map[string]ledgerEvent{}
	for rows.Next() {
		var e ledgerEvent
		if err := rows.Scan(&e.ID, &e.AggregateID, &e.Tx, &e.Seq); err != nil {
			return nil, fmt.Errorf("load ledger: %w", err)
		}
		out[e.ID] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load ledger: %w", err)
	}
	return out, nil
}

func loadApplied(ctx context.Context, db *gorm.DB) ([]delivery, error) {
	rows, err := db.WithContext(ctx).Raw(`SELECT id, event_id::text, aggregate_id FROM cs_apply_log ORDER BY id`).Rows()
	if err != nil {
		return nil, fmt.Errorf("load apply log: %w", err)
	}
	defer rows.Close()
	var out []delivery
	for rows.Next() {
		d := delivery{Partition: -1}
		if err := rows.Scan(&d.Offset, &d.EventID, &d.AggregateID); err != nil {
			return nil, fmt.Errorf("load apply log: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load apply log: %w", err)
	}
	return out, nil
}

// writeViolations writes every failure and violation example of a run to
// path, next to the processes' logs.
func writeViolations(path string, res *result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write violations: %w", err)
	}
	defer f.Close()
	printDetails(f, res, len(res.Report.Lost)+len(res.Report.Ghosts)+1000)
	return nil
}

// printDetails prints a run's failures, with up to limit ids per list.
func printDetails(w io.Writer, res *result, limit int) {
	r := res.Report
	for _, f := range res.Failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
	list := func(name string, ids []string) {
		if len(ids) == 0 {
			return
		}
		sorted := append([]string(nil), ids...)
		sort.Strings(sorted)
		if len(sorted) > limit {
			sorted = sorted[:limit]
		}
		fmt.Fprintf(w, "%s (%d):\n", name, len(ids))
		for _, id := range sorted {
			fmt.Fprintln(w, "  ", id)
		}
	}
	list("lost", r.Lost)
	list("ghosts", r.Ghosts)
	list("applied ghosts", r.ApplyGhosts)
	list("on the broker, never applied", r.NotApplied)
	list("aggregates on several partitions", r.SplitAggs)
	order := func(name string, o orderReport) {
		if o.Pairs == 0 {
			return
		}
		aggs := make([]string, 0, len(o.ByAggregate))
		for a, n := range o.ByAggregate {
			aggs = append(aggs, fmt.Sprintf("%s:%d", a, n))
		}
		sort.Strings(aggs)
		n := min(limit, len(o.Examples))
		fmt.Fprintf(w, "%s order violations: %d pairs in %d aggregates (%s); first %d:\n",
			name, o.Pairs, o.Aggregates, strings.Join(aggs, " "), n)
		for _, v := range o.Examples[:n] {
			fmt.Fprintln(w, "  ", v)
		}
	}
	order("broker", r.Order)
	order("consumer", r.ConsumerOrder)
}
