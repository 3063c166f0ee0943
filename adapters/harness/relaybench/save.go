package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

const (
	saveHooks       = "hooks plugin"
	saveByHand      = "outbox row by hand (plain INSERT, no plugin)"
	saveNoWake      = "hooks plugin, wake-up register dropped (writers never notify)"
	saveRelay       = "hooks plugin, our relay running on its own pool"
	saveByHandRelay = "outbox row by hand, the batched relay (poll 10ms) running on its own pool"
	saveRelayNoWake = "hooks plugin, wake-up register dropped, our relay running on its own pool (polling)"
)

// saveSection is section 3: the writers' cost of the outbox.
func (b *bench) saveSection(ctx context.Context) error {
	o := b.o
	drop, restore, err := wakeRegister()
	if err != nil {
		return err
	}
	viaPlugin := func(ctx context.Context, i int) error {
		a := Account{Balance: int64(i)}
		a.Record(b.ev.event(i))
		return b.db.WithContext(ctx).Create(&a).Error
	}
	type variant struct {
		label string
		write func(ctx context.Context, i int) error
		// relay runs our relay, as another process would (its own pool,
		// no in-process wake-up), while the writers write; batched runs
		// the batched relay instead (on the by-hand table).
		relay, batched bool
	}
	// The variants each ratio compares run one after the other (and, in
	// every other repetition, in reverse order): the machine's speed drifts
	// by several per cent over tens of seconds here, more than the gaps
	// measured.
	byHand := func(ctx context.Context, i int) error {
		return b.plain.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			a := Account{Balance: int64(i)}
			if err := tx.Create(&a).Error; err != nil {
				return err
			}
			sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
			if !ok {
				return fmt.Errorf("GORM transaction on %T, not *sql.Tx", tx.Statement.ConnPool)
			}
			_, err := insertPlain(ctx, func(q string, args ...any) error {
				_, err := sqlTx.ExecContext(ctx, q, args...)
				return err
			}, b.ev.event(i), fmt.Sprint(a.ID))
			return err
		})
	}
	variants := []variant{
		{label: saveByHand, write: byHand},
		{label: saveHooks, write: viaPlugin},
		{label: saveNoWake, write: viaPlugin},
		{label: saveRelay, write: viaPlugin, relay: true},
		{label: saveRelayNoWake, write: viaPlugin, relay: true},
		{label: saveByHandRelay, write: byHand, batched: true},
	}
	if b.cdc {
		// Without a slot, the server discards the messages at once:
		// what is measured is the writers' side of Messages mode.
		mdb, _, closeDB, err := b.messagesDB(fmt.Sprintf("relaybench_save_%d", b.started.UnixNano()))
		if err != nil {
			return err
		}
		defer closeDB()
		variants = append(variants, variant{label: saveMessages, write: func(ctx context.Context, i int) error {
			a := Account{Balance: int64(i)}
			a.Record(b.ev.event(i))
			return mdb.WithContext(ctx).Create(&a).Error
		}})
	}
	res := newResults()
	notes := map[string]int64{} // notifications sent while our relay ran, by variant
	txs := map[string]float64{} // and the transactions committed meanwhile (about)
	for rep := range o.reps {
		// Every other repetition runs the variants in reverse order, so
		// that no variant always follows the same one.
		order := slices.Clone(variants)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			b.progress("save rep %d: %s", rep+1, v.label)
			noWake := v.label == saveNoWake || v.label == saveRelayNoWake
			if noWake {
				if err := b.plain.Exec(drop).Error; err != nil {
					return fmt.Errorf("drop the wake-up register: %w", err)
				}
			}
			var stop, stopCount func() error
			var count *atomic.Int64
			if v.relay {
				if count, stopCount, err = b.countNotifications(ctx); err != nil {
					return err
				}
				if stop, err = b.startRelay(ctx); err != nil {
					return errors.Join(err, stopCount())
				}
			}
			if v.batched {
				pub, err := b.publisher("save relay")
				if err != nil {
					return err
				}
				r := &batchedRelay{db: b.sqlDB, pub: pub, batch: effectiveBatch(o.batch), poll: 10 * time.Millisecond}
				if stop, err = runUntilStopped(ctx, r.run, nil, nil); err != nil {
					return err
				}
				count, stopCount = new(atomic.Int64), func() error { return nil }
			}
			rate, err := b.runSave(ctx, v.write, v.label != saveMessages)
			if stop != nil {
				err = errors.Join(err, stop(), stopCount())
				notes[v.label] += count.Load()
				txs[v.label] += rate * o.duration.Seconds()
			}
			if noWake {
				if rerr := b.plain.Exec(restore).Error; rerr != nil {
					err = errors.Join(err, fmt.Errorf("restore the wake-up register: %w", rerr))
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", v.label, err)
			}
			res.add(v.label, rate)
		}
	}
	fmt.Fprintf(b.out, "\n### 3. Save: GORM transactions creating a business row and one event, %d writers, %s each\n\n", o.producers, o.duration)
	res.table(b.out, "tx/s", groupDigits)
	fmt.Fprintln(b.out)
	rs := []ratio{
		{"plugin / by hand", saveHooks, saveByHand},
		{"plugin / plugin with the wake-up register dropped (its read, every 100 ms)", saveHooks, saveNoWake},
		{"with a relay running: plugin / plugin with the register dropped (the wake-ups' cost to writers)", saveRelay, saveRelayNoWake},
		{"with a relay running: plugin (our relay) / by hand (the batched relay)", saveRelay, saveByHandRelay},
	}
	if b.cdc {
		rs = append(rs, ratio{"plugin, LogicalMessages / plugin (rows)", saveMessages, saveHooks})
	}
	res.ratios(b.out, rs)
	perK := func(label string) float64 { return 1000 * float64(notes[label]) / max(txs[label], 1) }
	fmt.Fprintf(b.out, "\nNOTIFYs the writers sent while our relay ran (all repetitions, counted by a LISTEN connection): %d with the register (%.2f per 1,000 transactions), %d with it dropped.\n",
		notes[saveRelay], perK(saveRelay), notes[saveRelayNoWake])
	fmt.Fprintln(b.out, "The plugin and the plugin with the register dropped do the same work while no relay waits (one read of the register per 100 ms per process, which finds no request, or no register): their ratio is this machine's noise between back-to-back runs.")
	return nil
}

// countNotifications listens on the outbox table's channel on a connection
// of its own and counts the notifications until the returned function
// stops it.
func (b *bench) countNotifications(ctx context.Context) (*atomic.Int64, func() error, error) {
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN "`+sqlstore.DefaultTable+`"`); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("listen: %w", err), conn.Close(ctx))
	}
	var n atomic.Int64
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.WaitForNotification(lctx); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return &n, func() error {
		cancel()
		<-done
		return conn.Close(context.Background())
	}, nil
}

var sequenceRE = regexp.MustCompile(`(?is)^\s*CREATE\s+SEQUENCE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+_wake)\s`)

// wakeRegister returns the statements that drop and recreate the outbox
// table's wake-up register (the sequence writers read to learn whether a
// relay waits), from sqlstore.OutboxDDL. Without it writers never notify
// and a relay polls: the baseline of the wake-ups' cost.
func wakeRegister() (drop, create string, err error) {
	ddl, err := sqlstore.OutboxDDL(sqlstore.Postgres, "")
	if err != nil {
		return "", "", err
	}
	for _, q := range ddl {
		if m := sequenceRE.FindStringSubmatch(q); m != nil {
			return "DROP SEQUENCE " + m[1], q, nil
		}
	}
	return "", "", errors.New("the outbox DDL has no wake-up sequence")
}

// startRelay runs our relay with its defaults on a pool of its own and a
// publisher of its own, until the returned function stops it.
func (b *bench) startRelay(ctx context.Context) (stop func() error, err error) {
	db, err := b.relayDB(0)
	if err != nil {
		return nil, err
	}
	store, err := newStore(db)
	if err != nil {
		return nil, err
	}
	pub, err := b.publisher("save relay")
	if err != nil {
		return nil, err
	}
	r, err := relay.New(store, pub, relay.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	<-r.Running()
	return func() error {
		cancel()
		return errors.Join(<-done, store.Close())
	}, nil
}

// runSave empties the tables, then runs o.producers goroutines calling
// write for o.duration, and returns the committed transactions per second;
// it checks that each wrote a business row and, when rows, an outbox row.
func (b *bench) runSave(ctx context.Context, write func(ctx context.Context, i int) error, rows bool) (float64, error) {
	if err := b.plain.WithContext(ctx).Exec(`TRUNCATE accounts RESTART IDENTITY`).Error; err != nil {
		return 0, err
	}
	if err := b.history(ctx); err != nil { // and a CHECKPOINT
		return 0, err
	}
	var next, done atomic.Int64
	var werr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(b.o.duration)
	for range b.o.producers {
		wg.Go(func() {
			for time.Now().Before(deadline) && werr.Load() == nil {
				if err := write(ctx, int(next.Add(1))); err != nil {
					werr.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := werr.Load(); e != nil {
		return 0, *e
	}
	// Every transaction wrote its business row and its event.
	var accounts, events int64
	if err := b.plain.Raw(`SELECT count(*) FROM accounts`).Scan(&accounts).Error; err != nil {
		return 0, err
	}
	if err := b.plain.Raw(`SELECT (SELECT count(*) FROM bench_outbox) + (SELECT count(*) FROM `+sqlstore.DefaultTable+`) - 2 * ?`, b.o.history).Scan(&events).Error; err != nil {
		return 0, err
	}
	if !rows {
		events = done.Load() // Messages mode writes no outbox row
	}
	if accounts != done.Load() || events != done.Load() {
		return 0, fmt.Errorf("%d transactions committed, but %d business rows and %d outbox rows written", done.Load(), accounts, events)
	}
	return float64(done.Load()) / elapsed.Seconds(), nil
}
