package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// latencyPath is one relay of the latency section: start runs it (publishing
// through rec) until stop; write commits the i-th event on account acct, as
// an application writer would, and returns the event's id.
type latencyPath struct {
	label string
	start func(ctx context.Context, rec *ackRecorder) (stop func() error, err error)
	write func(ctx context.Context, i int, acct int64) (id string, err error)
	// clock, when not nil, is the stage clock start wires into its store;
	// runLatency resets it for each run.
	clock *stageClock
}

// maxForwarderRate is the highest offered rate at which the latency
// section runs Watermill's forwarder, which drains about 700 events/s on
// a 2-core machine: above it, its backlog only grows.
const maxForwarderRate = 2000

// latencySection is section 2: commit → broker ack at a steady rate.
func (b *bench) latencySection(ctx context.Context) error {
	o := b.o
	var fwdTopic string // the forwarder topic of the current Watermill run
	wmPath := func(label string, poll time.Duration) latencyPath {
		return latencyPath{label,
			func(ctx context.Context, rec *ackRecorder) (func() error, error) {
				fwdTopic = b.wmTopic()
				sub, err := b.wmSubscriber(poll)
				if err != nil {
					return nil, err
				}
				err = sub.SubscribeInitialize(fwdTopic)
				sub.Close()
				if err != nil {
					return nil, err
				}
				stop, err := b.startForwarder(ctx, fwdTopic, poll, rec)
				if err != nil {
					return nil, err
				}
				return func() error {
					err := stop()
					return errors.Join(err, b.dropWatermill(ctx, fwdTopic))
				}, nil
			},
			func(ctx context.Context, i int, acct int64) (string, error) {
				var id string
				err := b.plainTx(ctx, acct, i, func(tx *sql.Tx) error {
					m, err := b.wmMessage(ctx, b.ev.event(i), fmt.Sprint(acct))
					if err != nil {
						return err
					}
					id = m.UUID
					return wmPublish(tx, fwdTopic, m)
				})
				return id, err
			}, nil}
	}
	oursClock := newStageClock()
	paths := []latencyPath{
		{"ours, defaults",
			func(ctx context.Context, rec *ackRecorder) (func() error, error) {
				db, err := b.relayDB(0)
				if err != nil {
					return nil, err
				}
				sqlDB, err := db.DB()
				if err != nil {
					return nil, err
				}
				s, err := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{})
				if err != nil {
					return nil, err
				}
				r, err := relay.New(stagedStore{s, oursClock}, rec, relay.Config{Logger: quietLogger()})
				if err != nil {
					return nil, err
				}
				return runUntilStopped(ctx, r.Run, r.Running(), s.Close)
			},
			b.oursLatencyWrite, oursClock},
		{"batched relay, poll 10ms",
			func(ctx context.Context, rec *ackRecorder) (func() error, error) {
				r := &batchedRelay{db: b.sqlDB, pub: rec, batch: effectiveBatch(o.batch), poll: 10 * time.Millisecond}
				return runUntilStopped(ctx, r.run, nil, nil)
			},
			func(ctx context.Context, i int, acct int64) (string, error) {
				var id string
				err := b.plainTx(ctx, acct, i, func(tx *sql.Tx) error {
					eid, err := insertPlain(ctx, func(q string, args ...any) error {
						_, err := tx.ExecContext(ctx, q, args...)
						return err
					}, b.ev.event(i), fmt.Sprint(acct))
					id = eid.String()
					return err
				})
				return id, err
			}, nil},
	}
	if o.rate <= maxForwarderRate {
		paths = append(paths,
			wmPath("Watermill forwarder, poll 10ms", 10*time.Millisecond),
			wmPath("Watermill forwarder, defaults (poll 1s)", 0))
	} else {
		fmt.Fprintf(b.out, "\nWatermill's forwarder left out of the latency section: it drains about 700 events/s here (the relay section), below the %s offered.\n", groupDigits(float64(o.rate)))
	}
	if b.cdc {
		paths = append(paths, b.cdcLatencyPath())
	}
	p50s, p99s, maxs, rates := newResults(), newResults(), newResults(), newResults()
	var oursStages stageTable
	total := 0
	for rep := range o.reps {
		for i := range paths {
			p := paths[(i+rep)%len(paths)] // rotated, as the relay section's
			b.progress("latency rep %d: %s", rep+1, p.label)
			lat, rate, stages, err := b.runLatency(ctx, p)
			if err != nil {
				return fmt.Errorf("%s: %w", p.label, err)
			}
			if stages != nil {
				oursStages.add(stages)
			}
			total = len(lat)
			p50s.add(p.label, ms(lat[len(lat)/2]))
			p99s.add(p.label, ms(lat[len(lat)*99/100]))
			maxs.add(p.label, ms(lat[len(lat)-1]))
			rates.add(p.label, rate)
		}
	}
	fmt.Fprintf(b.out, "\n### 2. Latency: commit → broker ack at %s events/s offered by %d GORM writers for %s (%s events a run)\n\n",
		groupDigits(float64(o.rate)), o.producers, o.duration, groupDigits(float64(total)))
	fmt.Fprintf(b.out, "| path | p50 ms | p99 ms | max ms | commits/s achieved |\n|---|---:|---:|---:|---:|\n")
	for _, l := range p50s.labels {
		med, lo, hi := spread(rates.vals[l])
		fmt.Fprintf(b.out, "| %s | %s | %s | %s | %s [%s – %s] |\n", l, msCell(p50s.vals[l]), msCell(p99s.vals[l]), msCell(maxs.vals[l]),
			groupDigits(med), groupDigits(lo), groupDigits(hi))
	}
	fmt.Fprintln(b.out)
	rs := []ratio{
		{"p99: ours / batched relay, poll 10ms", "ours, defaults", "batched relay, poll 10ms"},
		{"p99: ours / Watermill forwarder, poll 10ms", "ours, defaults", "Watermill forwarder, poll 10ms"},
	}
	if b.cdc {
		rs = append(rs, ratio{"p99: CDC / ours", cdcLatencyLabel, "ours, defaults"})
	}
	p99s.ratios(b.out, rs)
	fmt.Fprintln(b.out)
	oursStages.print(b.out, "ours, defaults")
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msCell formats a median with its spread.
func msCell(vs []float64) string {
	med, lo, hi := spread(vs)
	f := func(v float64) string {
		if v >= 100 {
			return groupDigits(v)
		}
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%s [%s – %s]", f(med), f(lo), f(hi))
}

// plainTx runs a writer's transaction without the plugin: the business row's
// update, then fn with the transaction's *sql.Tx.
func (b *bench) plainTx(ctx context.Context, acct int64, i int, fn func(tx *sql.Tx) error) error {
	return b.plain.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Account{ID: acct}).Update("balance", i).Error; err != nil {
			return err
		}
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return fmt.Errorf("GORM transaction on %T, not *sql.Tx", tx.Statement.ConnPool)
		}
		return fn(sqlTx)
	})
}

// runUntilStopped runs fn in a goroutine until the returned stop is called,
// after running (when not nil) is closed; stop then calls closeFn (when not
// nil).
func runUntilStopped(ctx context.Context, fn func(context.Context) error, running <-chan struct{}, closeFn func() error) (func() error, error) {
	ctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- fn(ctx) }()
	if running != nil {
		select {
		case <-running:
		case err := <-errc:
			cancel()
			return nil, err
		}
	}
	return func() error {
		cancel()
		err := <-errc
		if closeFn != nil {
			err = errors.Join(err, closeFn())
		}
		return err
	}, nil
}

// resetAccounts empties the outboxes and recreates the aggregates' rows.
func (b *bench) resetAccounts(ctx context.Context) error {
	if err := b.history(ctx); err != nil {
		return err
	}
	if err := b.plain.WithContext(ctx).Exec(`TRUNCATE accounts RESTART IDENTITY`).Error; err != nil {
		return err
	}
	accts := make([]Account, b.o.aggregates)
	if err := b.plain.WithContext(ctx).CreateInBatches(&accts, 1000).Error; err != nil {
		return err
	}
	return settle(b.plain, "accounts")
}

// runLatency runs p while o.producers writers commit one event per
// transaction at o.rate for o.duration, and returns every event's latency
// from its writer's Commit returning to the relay's Publish of it returning,
// sorted, and the commits per second the writers achieved (below o.rate
// when they could not keep up). A relay that publishes an event before its
// writer's Commit has returned gets 0.
func (b *bench) runLatency(ctx context.Context, p latencyPath) ([]time.Duration, float64, [][]time.Duration, error) {
	o := b.o
	if err := b.resetAccounts(ctx); err != nil {
		return nil, 0, nil, err
	}
	pub, err := b.publisher("latency")
	if err != nil {
		return nil, 0, nil, err
	}
	rec := newAckRecorder(pub)
	stop, err := p.start(ctx, rec)
	if err != nil {
		return nil, 0, nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	// One event first, so the relay is past its start (subscriptions,
	// first claims) when the clock starts; it is not counted.
	if _, err := p.write(ctx, 0, 1); err != nil {
		return nil, 0, nil, fmt.Errorf("warm-up write: %w", err)
	}
	if err := waitFor(time.Minute, func() bool { return rec.count() >= 1 }); err != nil {
		return nil, 0, nil, errors.New("the warm-up event was not published within a minute")
	}
	rec.mu.Lock()
	clear(rec.acks)
	rec.mu.Unlock()
	if p.clock != nil {
		p.clock.reset()
	}

	total := max(1, int(float64(o.rate)*o.duration.Seconds()))
	commits := make([]time.Time, total)
	ids := make([]string, total)
	jobs := make(chan int, 1024)
	var wg sync.WaitGroup
	var werr atomic.Pointer[error]
	for w := range o.producers {
		wg.Go(func() {
			for i := range jobs {
				id, err := p.write(ctx, i, int64(1+(i*o.producers+w)%o.aggregates))
				if err != nil {
					werr.CompareAndSwap(nil, &err)
					continue
				}
				commits[i], ids[i] = time.Now(), id
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(o.rate)
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing the offered load
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if e := werr.Load(); e != nil {
		return nil, 0, nil, fmt.Errorf("writer: %w", *e)
	}
	if err := waitFor(time.Minute, func() bool { return rec.count() >= total }); err != nil {
		return nil, 0, nil, fmt.Errorf("%d of %d events acknowledged within a minute of the last commit", rec.count(), total)
	}
	stopped = true
	if err := stop(); err != nil {
		return nil, 0, nil, err
	}
	lat := make([]time.Duration, 0, total)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, id := range ids {
		ack, ok := rec.acks[id]
		if !ok {
			return nil, 0, nil, fmt.Errorf("event %s was not published", id)
		}
		lat = append(lat, max(0, ack.Sub(commits[i])))
	}
	slices.Sort(lat)
	var stages [][]time.Duration
	if p.clock != nil {
		stages = p.clock.stages(ids, commits, rec.acks)
	}
	return lat, float64(total) / slices.MaxFunc(commits, time.Time.Compare).Sub(start).Seconds(), stages, nil
}

// oursLatencyWrite saves account acct with the i-th event through the
// plugin, in one transaction, and returns the event's id.
func (b *bench) oursLatencyWrite(ctx context.Context, i int, acct int64) (string, error) {
	a := Account{ID: acct, Balance: int64(i)}
	a.Record(b.ev.event(i))
	id := a.OutboxRecorder().Pending()[0].ID.String()
	return id, b.db.WithContext(ctx).Model(&a).Updates(map[string]any{"balance": a.Balance}).Error
}
