package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
)

const (
	saveHooks    = "hooks plugin"
	saveByHand   = "outbox row by hand (plain INSERT, no plugin)"
	saveNoNotify = "hooks plugin, NOTIFY trigger dropped"
)

// saveSection is section 3: the writers' cost of the outbox.
func (b *bench) saveSection(ctx context.Context) error {
	o := b.o
	drop, restore, err := notifyTrigger()
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
	}
	variants := []variant{
		{saveHooks, viaPlugin},
		{saveByHand, func(ctx context.Context, i int) error {
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
		}},
	}
	if drop != "" {
		variants = append(variants, variant{saveNoNotify, viaPlugin})
	}
	res := newResults()
	for rep := range o.reps {
		for _, v := range variants {
			b.progress("save rep %d: %s", rep+1, v.label)
			if v.label == saveNoNotify {
				if err := b.plain.Exec(drop).Error; err != nil {
					return fmt.Errorf("drop the NOTIFY trigger: %w", err)
				}
			}
			rate, err := b.runSave(ctx, v.write)
			if v.label == saveNoNotify {
				if rerr := b.plain.Exec(restore).Error; rerr != nil {
					err = errors.Join(err, fmt.Errorf("restore the NOTIFY trigger: %w", rerr))
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
	if drop == "" {
		fmt.Fprintln(b.out, "\n(the outbox table has no NOTIFY trigger: the third variant is the first)")
	}
	fmt.Fprintln(b.out)
	res.ratios(b.out, []ratio{
		{"plugin / by hand", saveHooks, saveByHand},
		{"plugin / plugin without the NOTIFY trigger", saveHooks, saveNoNotify},
	})
	return nil
}

var triggerRE = regexp.MustCompile(`(?is)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+(\w+)\s.*?\sON\s+(\w+)\s`)

// notifyTrigger returns the statements that drop and recreate the outbox
// table's trigger, from hooks.DDL; both are empty when it has none.
func notifyTrigger() (drop, create string, err error) {
	ddl, err := hooks.DDL("postgres", "")
	if err != nil {
		return "", "", err
	}
	for _, q := range ddl {
		if m := triggerRE.FindStringSubmatch(q); m != nil {
			return "DROP TRIGGER " + m[1] + " ON " + m[2], q, nil
		}
	}
	return "", "", nil
}

// runSave empties the tables, then runs o.producers goroutines calling
// write for o.duration, and returns the committed transactions per second.
func (b *bench) runSave(ctx context.Context, write func(ctx context.Context, i int) error) (float64, error) {
	for _, q := range []string{`TRUNCATE ` + hooks.DefaultTable, `TRUNCATE bench_outbox`, `TRUNCATE accounts RESTART IDENTITY`, `CHECKPOINT`} {
		if err := b.plain.WithContext(ctx).Exec(q).Error; err != nil && q != `CHECKPOINT` {
			return 0, err
		}
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
	if err := b.plain.Raw(`SELECT (SELECT count(*) FROM bench_outbox) + (SELECT count(*) FROM ` + hooks.DefaultTable + `)`).Scan(&events).Error; err != nil {
		return 0, err
	}
	if accounts != done.Load() || events != done.Load() {
		return 0, fmt.Errorf("%d transactions committed, but %d business rows and %d outbox rows written", done.Load(), accounts, events)
	}
	return float64(done.Load()) / elapsed.Seconds(), nil
}
