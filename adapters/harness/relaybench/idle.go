package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

const (
	idleBroker = "broker alone"
	idleRelay  = "broker + our relay, defaults, nothing to relay"
	idleDiff   = "the relay's share"
)

// idleSection is section 5: the CPU the relay uses with nothing to do.
func (b *bench) idleSection(ctx context.Context) error {
	o := b.o
	if err := b.plain.Exec(`TRUNCATE ` + sqlstore.DefaultTable).Error; err != nil {
		return err
	}
	db, err := b.relayDB(0)
	if err != nil {
		return err
	}
	pub, err := b.publisher("idle")
	if err != nil {
		return err
	}
	res := newResults()
	for rep := range o.reps {
		b.progress("idle rep %d", rep+1)
		base, err := cpuShare(o.idle)
		if err != nil {
			return err
		}
		s, err := newStore(db)
		if err != nil {
			return err
		}
		r, err := relay.New(s, pub, relay.Config{Logger: quietLogger()})
		if err != nil {
			return err
		}
		stop, err := runUntilStopped(ctx, r.Run, r.Running(), s.Close)
		if err != nil {
			return err
		}
		busy, err := cpuShare(o.idle)
		if serr := stop(); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		res.add(idleBroker, base)
		res.add(idleRelay, busy)
		res.add(idleDiff, busy-base)
	}
	fmt.Fprintf(b.out, "\n### 5. Idle: CPU of this process (getrusage) over %s, %% of one core\n\n", o.idle)
	res.table(b.out, "% of a core", func(v float64) string { return fmt.Sprintf("%.2f", v) })
	return nil
}

// cpuShare returns the CPU time the process used over d (user and system,
// every thread), in percent of one core.
func cpuShare(d time.Duration) (float64, error) {
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d) // the measurement window
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		return 0, err
	}
	used := tv(after.Utime) - tv(before.Utime) + tv(after.Stime) - tv(before.Stime)
	return 100 * float64(used) / float64(time.Since(start)), nil
}

func tv(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}
