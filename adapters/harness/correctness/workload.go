package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// Write paths, as -paths takes them.
const (
	// pathSave is every write of Account aggregates: Save and Create (of
	// slices) in db.Transaction, in GORM's own transaction and with
	// SkipDefaultTransaction, the rollbacks, savepoints and retries.
	// Writes of one account are serialised by its writer (and its row).
	pathSave = "save"
	// pathEnqueue is Plugin.Enqueue on the hot aggregates from every
	// writer, with no row lock, some rolled back.
	pathEnqueue = "enqueue"
)

// parsePaths turns -paths ("all", "save" or "enqueue") into a set.
func parsePaths(s string) (map[string]bool, error) {
	switch s {
	case "", "all":
		return map[string]bool{pathSave: true, pathEnqueue: true}, nil
	case pathSave, pathEnqueue:
		return map[string]bool{s: true}, nil
	}
	return nil, fmt.Errorf("unknown -paths %q (known: all, save, enqueue)", s)
}

// errRollback is what a writer returns to roll a transaction back on
// purpose.
var errRollback = errors.New("correctness: rolled back on purpose")

// workload runs the writers: several goroutines saving accounts and
// enqueueing notes through GORM, with rollbacks of every kind, and records
// the commit window of every transaction that may have committed.
type workload struct {
	db    *gorm.DB
	sdb   suiteDB
	ob    *outbox
	seed  int64
	start time.Time // the monotonic clock's origin
	pace  time.Duration
	hot   []string
	paths map[string]bool

	// maxBacklog is the pending messages above which the writers wait
	// (see watchBacklog); backlog is the last count read.
	maxBacklog int64
	backlog    atomic.Int64
	// throttled is how long the writers waited for the backlog, in
	// nanoseconds summed over the writers.
	throttled atomic.Int64

	nextTx atomic.Int64

	mu      sync.Mutex
	commits map[int64]commitWindow
	poison  map[string]bool
	stats   workloadStats
}

// workloadStats counts transaction attempts by outcome and write path.
type workloadStats struct {
	Attempts   int
	Committed  int
	RolledBack int // whole transactions rolled back (error or panic)
	Savepoints int // savepoints rolled back inside committed transactions
	Retried    int // rolled-back aggregates saved again (same in-memory value)
	Abandoned  int // rolled-back aggregates reloaded, their events dropped
	Deadlocks  int // rolled back by the database's deadlock detection (counted in RolledBack too)
	Unexpected int // transactions that failed for a reason the suite did not cause
	ByPath     map[string]int
	LastError  string
	// Throttled is how long the writers waited for the relays to bring the
	// backlog down (summed over the writers; see workload.watchBacklog).
	Throttled time.Duration
}

func newWorkload(db *gorm.DB, sdb suiteDB, ob *outbox, seed int64, pace time.Duration, hot int, paths map[string]bool, maxBacklog int) *workload {
	w := &workload{db: db, sdb: sdb, ob: ob, seed: seed, start: time.Now(), pace: pace, paths: paths,
		maxBacklog: int64(maxBacklog), commits: map[int64]commitWindow{}, poison: map[string]bool{}}
	w.stats.ByPath = map[string]int{}
	for i := range hot {
		w.hot = append(w.hot, "hot-"+strconv.Itoa(i))
	}
	return w
}

// now reads the monotonic clock, in nanoseconds since the run started.
func (w *workload) now() int64 { return int64(time.Since(w.start)) }

func (w *workload) newTx(writer int) *txMeta {
	return &txMeta{writer: writer, id: w.nextTx.Add(1), onDup: w.sdb.ignoreDuplicate()}
}

// finish records the outcome of one transaction attempt. Every attempt that
// may have committed gets its commit window, so the ledger can always be
// ordered; only the ledger says whether it committed.
func (w *workload) finish(m *txMeta, path string, before, after int64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Attempts++
	w.stats.ByPath[path]++
	switch {
	case err == nil:
		w.stats.Committed++
	case errors.Is(err, errRollback) || errors.Is(err, errPanicked):
		w.stats.RolledBack++
		return
	case isDeadlock(err):
		// Two transactions wrote events of the same aggregates in opposite
		// orders: the outbox's per-aggregate locks (commit order) make one
		// wait for the other, and PostgreSQL aborts one, as with row locks.
		// An application retries it; here it is one more rollback.
		w.stats.RolledBack++
		w.stats.Deadlocks++
		return
	default:
		w.stats.Unexpected++
		w.stats.LastError = err.Error()
	}
	if before == 0 {
		before = after // failed before the commit point: no rows can exist
	}
	w.commits[m.id] = commitWindow{Before: before, After: after}
}

// isDeadlock reports a transaction the database aborted to break a
// deadlock (PostgreSQL's 40P01, MySQL's 1213).
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	var me *mysql.MySQLError
	return errors.As(err, &pe) && pe.Code == "40P01" || errors.As(err, &me) && me.Number == 1213
}

// errPanicked marks a transaction that a panic rolled back.
var errPanicked = errors.New("correctness: panicked inside db.Transaction")

// inTx runs fn in db.Transaction. The commit window starts when fn has
// done its work (right before GORM commits) and ends when Transaction
// returns. A panic in fn rolls the transaction back (GORM re-panics) and
// is recovered here.
func (w *workload) inTx(ctx context.Context, writer int, path string, fn func(tx *gorm.DB, m *txMeta) error) (err error) {
	m := w.newTx(writer)
	var before int64
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
		w.finish(m, path, before, w.now(), err)
	}()
	return w.db.WithContext(withTx(ctx, m)).Transaction(func(tx *gorm.DB) error {
		if err := fn(tx, m); err != nil {
			return err
		}
		before = w.now()
		return nil
	})
}

// implicit runs fn on a session of its own (GORM's default transaction, or
// the plugin's with SkipDefaultTransaction); the commit window is the whole
// call.
func (w *workload) implicit(ctx context.Context, writer int, path string, fn func(db *gorm.DB) error) error {
	m := w.newTx(writer)
	before := w.now()
	err := fn(w.db.WithContext(withTx(ctx, m)))
	w.finish(m, path, before, w.now(), err)
	return err
}

// enqueue writes notes of aggregate agg with Enqueue and their ledger rows.
func (w *workload) enqueue(tx *gorm.DB, m *txMeta, agg string, events ...runtime.Event) error {
	ids, err := w.ob.enqueue(tx, agg, events...)
	if err != nil {
		return err
	}
	return writeLedger(tx, m, agg, ids)
}

// writer is one writer goroutine and the accounts it owns (only it touches
// them: a Recorder is not safe for concurrent use).
type writer struct {
	w     *workload
	id    int
	rng   *rand.Rand
	accts []*Account
	retry *Account // rolled back, to be saved again as it is
}

// maxAccounts bounds the accounts per writer.
const maxAccounts = 16

// run writes until ctx is done.
func (wr *writer) run(ctx context.Context) {
	if err := wr.createAccounts(ctx, 4); err != nil {
		wr.w.noteError(err)
	}
	for ctx.Err() == nil {
		if !wr.w.waitBacklog(ctx) {
			return
		}
		wr.step(ctx)
		pause := time.Duration(wr.rng.Int64N(int64(2*wr.w.pace) + 1))
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// backlogEvery is how often watchBacklog reads the outbox's pending count.
const backlogEvery = 200 * time.Millisecond

// watchBacklog reads the outbox's pending count every backlogEvery until
// ctx is done, for waitBacklog. The writers commit at a pace set for a
// quiet machine; where the relays publish more slowly than that (one
// active relay of race-instrumented processes beside other test
// binaries on two cores), an unbounded backlog would put every probe
// behind it, and the faults' bounds would measure the backlog, not the
// recovery. The probes and the faults' own transactions are not held
// back; a stuck relay still fails the run, its backlog never draining.
func (w *workload) watchBacklog(ctx context.Context) {
	t := time.NewTicker(backlogEvery)
	defer t.Stop()
	for {
		if st, err := w.ob.stats(ctx); err == nil {
			w.backlog.Store(st.Pending)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// waitBacklog waits while the last pending count read exceeds
// maxBacklog, and reports false when ctx ended first.
func (w *workload) waitBacklog(ctx context.Context) bool {
	if w.backlog.Load() <= w.maxBacklog {
		return ctx.Err() == nil
	}
	start := time.Now()
	defer func() { w.throttled.Add(int64(time.Since(start))) }()
	t := time.NewTicker(backlogEvery / 4)
	defer t.Stop()
	for w.backlog.Load() > w.maxBacklog {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

func (w *workload) noteError(err error) {
	w.mu.Lock()
	w.stats.LastError = err.Error()
	w.mu.Unlock()
}

// step runs one transaction of a randomly chosen kind.
func (wr *writer) step(ctx context.Context) {
	ctx = context.WithoutCancel(ctx) // a started transaction finishes
	if a := wr.retry; a != nil {
		wr.retry = nil
		wr.w.count(func(s *workloadStats) { s.Retried++ })
		a.Deposit(wr.amount())
		_ = wr.w.inTx(ctx, wr.id, "retry", func(tx *gorm.DB, _ *txMeta) error { return tx.Save(a).Error })
		return
	}
	r := wr.rng.IntN(100)
	switch {
	case !wr.w.paths[pathSave]:
		r = 52 // Enqueue only
	case !wr.w.paths[pathEnqueue] && r >= 52 && r < 76:
		r = 0 // saves only
	}
	switch {
	case r < 30 || r >= 94: // db.Transaction + Save, 1-4 events
		a := wr.pick()
		for range 1 + wr.rng.IntN(4) {
			a.Deposit(wr.amount())
		}
		_ = wr.w.inTx(ctx, wr.id, "tx-save", func(tx *gorm.DB, _ *txMeta) error { return tx.Save(a).Error })
	case r < 42: // Save in GORM's own transaction
		a := wr.pick()
		a.Deposit(wr.amount())
		_ = wr.w.implicit(ctx, wr.id, "save", func(db *gorm.DB) error { return db.Save(a).Error })
	case r < 48: // SkipDefaultTransaction session: the plugin's transaction
		a := wr.pick()
		a.Deposit(wr.amount())
		_ = wr.w.implicit(ctx, wr.id, "skip-default-tx", func(db *gorm.DB) error {
			return db.Session(&gorm.Session{SkipDefaultTransaction: true}).Save(a).Error
		})
	case r < 52: // Create of a slice
		if len(wr.accts) < maxAccounts {
			_ = wr.createAccounts(ctx, 2+wr.rng.IntN(2))
		}
	case r < 76: // Enqueue on a hot aggregate, no row lock, from every writer
		agg := wr.w.hot[wr.rng.IntN(len(wr.w.hot))]
		n := 1 + wr.rng.IntN(2)
		think := time.Duration(wr.rng.Int64N(int64(15 * time.Millisecond)))
		rollback := wr.rng.IntN(8) == 0
		_ = wr.w.inTx(ctx, wr.id, "enqueue", func(tx *gorm.DB, m *txMeta) error {
			evts := make([]runtime.Event, n)
			for i := range evts {
				evts[i] = NewNoted(runtime.SystemClock{}, int32(wr.id), "note")
			}
			if err := wr.w.enqueue(tx, m, agg, evts...); err != nil {
				return err
			}
			time.Sleep(think) // work inside the transaction
			if rollback {
				return errRollback
			}
			return nil
		})
	case r < 83: // rolled back by an error
		a := wr.pick()
		a.Deposit(wr.amount())
		err := wr.w.inTx(ctx, wr.id, "rollback-error", func(tx *gorm.DB, _ *txMeta) error {
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			return errRollback
		})
		wr.afterRollback(ctx, a, err)
	case r < 88: // rolled back by a panic inside db.Transaction
		a := wr.pick()
		a.Deposit(wr.amount())
		err := wr.w.inTx(ctx, wr.id, "rollback-panic", func(tx *gorm.DB, _ *txMeta) error {
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			panic("correctness: panic after the save")
		})
		wr.afterRollback(ctx, a, err)
	default: // a savepoint rolled back inside a committed transaction
		a := wr.pick()
		b := wr.pick()
		if a == b {
			return
		}
		a.Deposit(wr.amount())
		b.Deposit(wr.amount())
		var inner error
		err := wr.w.inTx(ctx, wr.id, "savepoint", func(tx *gorm.DB, _ *txMeta) error {
			if err := tx.Save(a).Error; err != nil {
				return err
			}
			inner = tx.Transaction(func(tx2 *gorm.DB) error {
				if err := tx2.Save(b).Error; err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(inner, errRollback) {
				return inner
			}
			return nil
		})
		if err == nil {
			wr.w.count(func(s *workloadStats) { s.Savepoints++ })
			wr.afterRollback(ctx, b, inner)
		} else {
			wr.afterRollback(ctx, a, err)
		}
	}
}

// afterRollback decides the fate of an aggregate whose save rolled back:
// save the same in-memory value again (its pending events included), or
// reload it and drop them, so that they must never appear anywhere.
func (wr *writer) afterRollback(ctx context.Context, a *Account, err error) {
	if err == nil {
		return
	}
	if wr.rng.IntN(2) == 0 {
		wr.retry = a
		return
	}
	fresh := &Account{}
	if err := wr.w.db.WithContext(ctx).First(fresh, a.ID).Error; err != nil {
		wr.w.noteError(fmt.Errorf("reload account %d: %w", a.ID, err))
		return
	}
	fresh.audited = fresh.Balance / auditEvery
	for i := range wr.accts {
		if wr.accts[i] == a {
			wr.accts[i] = fresh
		}
	}
	wr.w.count(func(s *workloadStats) { s.Abandoned++ })
}

// createAccounts creates n accounts with one Create of a slice, each
// recording AccountOpened.
func (wr *writer) createAccounts(ctx context.Context, n int) error {
	batch := make([]Account, n)
	for i := range batch {
		batch[i].Open(fmt.Sprintf("writer-%d", wr.id))
	}
	err := wr.w.implicit(ctx, wr.id, "create-slice", func(db *gorm.DB) error { return db.Create(&batch).Error })
	if err != nil {
		return err
	}
	for i := range batch {
		wr.accts = append(wr.accts, &batch[i])
	}
	return nil
}

func (wr *writer) pick() *Account { return wr.accts[wr.rng.IntN(len(wr.accts))] }

func (wr *writer) amount() int64 { return 1 + wr.rng.Int64N(2000) }

func (w *workload) count(f func(*workloadStats)) {
	w.mu.Lock()
	f(&w.stats)
	w.mu.Unlock()
}

// longTx enqueues one note on agg and keeps its transaction open for hold
// while the writers go on committing notes of the same aggregate: its id
// is lower than theirs, its commit later.
func (w *workload) longTx(ctx context.Context, agg string, hold time.Duration) error {
	return w.inTx(context.WithoutCancel(ctx), -1, "long-tx", func(tx *gorm.DB, m *txMeta) error {
		if err := w.enqueue(tx, m, agg, NewNoted(runtime.SystemClock{}, -1, "long-running transaction")); err != nil {
			return err
		}
		time.Sleep(hold) // the fault: a transaction held open
		return nil
	})
}

// poisonTx enqueues a note of size bytes on agg, more than the broker
// takes, then three ordinary notes on the same aggregate, which must get
// through once the poison message is parked.
func (w *workload) poisonTx(ctx context.Context, agg string, size int) error {
	ctx = context.WithoutCancel(ctx)
	err := w.inTx(ctx, -2, "poison", func(tx *gorm.DB, m *txMeta) error {
		ids, err := w.ob.enqueue(tx, agg, NewNoted(runtime.SystemClock{}, -2, strings.Repeat("p", size)))
		if err != nil {
			return err
		}
		w.mu.Lock()
		for _, id := range ids {
			w.poison[id.String()] = true
		}
		w.mu.Unlock()
		return writeLedger(tx, m, agg, ids)
	})
	if err != nil {
		return err
	}
	for i := range 3 {
		err := w.inTx(ctx, -2, "poison-followup", func(tx *gorm.DB, m *txMeta) error {
			return w.enqueue(tx, m, agg, NewNoted(runtime.SystemClock{}, -2, "after the poison "+strconv.Itoa(i)))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// snapshot returns copies of the commit windows, poison ids and counters.
func (w *workload) snapshot() (map[int64]commitWindow, map[string]bool, workloadStats) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := make(map[int64]commitWindow, len(w.commits))
	for k, v := range w.commits {
		c[k] = v
	}
	p := make(map[string]bool, len(w.poison))
	for k := range w.poison {
		p[k] = true
	}
	s := w.stats
	s.Throttled = time.Duration(w.throttled.Load())
	s.ByPath = map[string]int{}
	for k, v := range w.stats.ByPath {
		s.ByPath[k] = v
	}
	return c, p, s
}
