package main

// Fencing and crash takeover (issue 33): the freeze, netsplit and crash
// faults, and the stale-record check on the raw log.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"
)

// crashTakeover is how soon after a relay process dies a standby must have
// taken its shards over, before its next poll publishes: the database sees
// the dead relay's session end (its session lock goes with it) and a
// standby's look finds the shards free. A crash is bounded by this, not by
// the lease TTL (issue 33); a paused or cut-off relay still is taken over
// only after its lease expires or it hands over.
const crashTakeover = time.Second

// slowProduce is how long the frozen relay's proxy holds each produce
// response during freeze: a broker answering slowly, so that the relay is
// inside a publish, waiting, when it is stopped.
const slowProduce = 100 * time.Millisecond

// fenceWindow is the span in which what a relay that lost its shards wrote
// to the broker is checked against its successor's writes: from the fault
// (SIGSTOP, split) until its settle after the heal, when no other fault
// has run yet (the measured faults run alone and end with a settle).
type fenceWindow struct {
	Fault    string
	Relay    int
	At       time.Duration // the fault, since the load started
	From, To time.Time
}

// fenceResult is the stale-record check of one fenceWindow.
type fenceResult struct {
	fenceWindow
	// Late are the fenced relay's records written after its successor's
	// first record of the same aggregate (invariant 10's fencing
	// violations, duplicates of the same event included); Stale are those
	// of them that went behind a later event of their aggregate (see
	// checkStale).
	Late, Stale int
	// Wrote is every record the fenced relay wrote within the window.
	Wrote int
	// Examples describe the first stale (or else late) records.
	Examples []string
}

func (f fenceResult) failure() string {
	if f.Stale == 0 {
		return ""
	}
	return fmt.Sprintf("%s at %.1fs: %d stale records from relay-%d on the broker after its successor's (%d of its records after the successor's first of their aggregate), e.g. %s",
		f.Fault, f.At.Seconds(), f.Stale, f.Relay, f.Late, strings.Join(f.Examples, "; "))
}

// recordFence notes a fence window for the check after the run.
func (e *faultEnv) recordFence(fault string, r int, from time.Time) {
	e.mu.Lock()
	e.fences = append(e.fences, fenceWindow{Fault: fault, Relay: r, At: from.Sub(e.start), From: from, To: time.Now()})
	e.mu.Unlock()
}

// freeze SIGSTOPs relay r (one that holds shards) while it is inside a
// publish for hold, then SIGCONTs it: its proxy answers each produce
// request slowly (slowProduce) and the SIGSTOP comes right after the proxy
// forwarded one of its produce requests, so that the relay is stopped
// waiting for the answer, with kafka-go's request deadline running out
// while it is stopped. It measures the takeover (from the SIGSTOP) and
// records the window for the stale-record check.
func (e *faultEnv) freeze(r int, hold time.Duration) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.Freezes++ })
		r, before, err := e.shardHolder(ctx, r)
		if err != nil {
			return err
		}
		proxy := e.brokerProxies[r]
		proxy.Slow(slowProduce)
		defer proxy.Slow(0)
		stopped := make(chan error, 1)
		proxy.OnProduce(func() { stopped <- e.relays[r].signal(syscall.SIGSTOP) })
		mid := "mid-publish"
		select {
		case err = <-stopped:
		case <-time.After(5 * time.Second):
			// No produce request for 5 s: stop it anyway; the note says so.
			proxy.OnProduce(nil)
			mid = "no publish in 5s, stopped idle"
			err = e.relays[r].signal(syscall.SIGSTOP)
		}
		if err != nil {
			return err
		}
		at := time.Now()
		check := e.noteTakeover(ctx, before, fmt.Sprintf("relay-%d stopped %s; ", r, mid), fmt.Sprintf("relay-%d was frozen: its takeover", r))
		err = e.measure(ctx, healthy, faultFreeze, at, hold, func() error { return e.relays[r].signal(syscall.SIGCONT) }, check)
		time.Sleep(settle) // the resumed relay finds its leases lost; its late writes land
		e.recordFence(faultFreeze, r, at)
		return err
	}
}

// netsplit blackholes the broker link of relay r (one that holds shards)
// for hold, then heals it (brokerProxy.Split: what the relay wrote is
// delivered at the heal unless it reset the connection). The split comes
// right after the proxy forwarded one of its produce requests, so that it
// lands inside a publish. The relay keeps its database, so it hands its
// shards over (HandOverAfter) rather than letting its leases expire. It
// measures the takeover (from the split) and records the window for the
// stale-record check.
func (e *faultEnv) netsplit(r int, hold time.Duration) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.Netsplits++ })
		r, before, err := e.shardHolder(ctx, r)
		if err != nil {
			return err
		}
		proxy := e.brokerProxies[r]
		split := make(chan struct{}, 1)
		proxy.OnProduce(func() { proxy.Split(); split <- struct{}{} })
		mid := "mid-publish"
		select {
		case <-split:
		case <-time.After(5 * time.Second):
			proxy.OnProduce(nil)
			mid = "no publish in 5s, split idle"
			proxy.Split()
		}
		at := time.Now()
		dropped := proxy.droppedFrames()
		check := e.noteTakeover(ctx, before, fmt.Sprintf("relay-%d split %s; ", r, mid), fmt.Sprintf("relay-%d was split from the broker: its hand-over", r))
		if e.kind == relayCDC { // a CDC relay keeps its slot
			check = func() (string, error) { return fmt.Sprintf("(relay-%d split %s, keeping its slot)", r, mid), nil }
		}
		err = e.measure(ctx, healthy, faultNetsplit, at, hold, func() error { proxy.Heal(); return nil }, check)
		time.Sleep(settle)
		e.logf("%6.2fs netsplit: relay-%d's proxy dropped %d frames of connections it reset or closed before they were set up", time.Since(e.start).Seconds(), r, proxy.droppedFrames()-dropped)
		e.recordFence(faultNetsplit, r, at)
		return err
	}
}

// crash SIGKILLs relay r (one that holds shards) and measures, from the
// kill, how soon the events committed after it are published: by a standby
// (several relays), or by the relay restarted at once (one relay). The
// killed relay restarts after the measurement.
func (e *faultEnv) crash(r int) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.Crashes++ })
		r, before, err := e.shardHolder(ctx, r)
		if err != nil {
			return err
		}
		// Killed right after a lease renewal, the worst case for a
		// takeover that waits for the leases to expire (LeaseTTL), and no
		// matter for one that sees the session end.
		when := e.afterRenewal(ctx, r)
		at := time.Now()
		if err := e.relays[r].kill(); err != nil {
			return err
		}
		var check func() (string, error)
		if len(e.relays) > 1 {
			check = e.noteTakeover(ctx, before, fmt.Sprintf("relay-%d killed %s; ", r, when), fmt.Sprintf("relay-%d was killed: its takeover", r))
		} else if err := e.relays[r].restart(); err != nil {
			return err
		}
		err = e.measure(ctx, healthy, faultCrash, at, 0, nil, check)
		err = errors.Join(err, e.relays[r].restart())
		time.Sleep(settle)
		return err
	}
}

// afterRenewal waits (up to 2 renewal intervals) until relay r renews its
// leases, polling their expiry every 10 ms, and says how it went.
func (e *faultEnv) afterRenewal(ctx context.Context, r int) string {
	if e.kind == relayCDC {
		return "at once (a CDC relay has no lease)"
	}
	owner, err := e.relays[r].owner()
	if err != nil || owner == "" {
		return "at once (owner unknown)"
	}
	first, ok, err := e.ob.leaseExpiry(ctx, e.db, owner)
	if err != nil || !ok {
		return "at once (no lease expiry to watch)"
	}
	for deadline := time.Now().Add(2 * relayLeaseTTL / 5); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		exp, ok, err := e.ob.leaseExpiry(ctx, e.db, owner)
		if err != nil || !ok {
			return "at once (lost sight of its leases)"
		}
		if exp.After(first) {
			return "right after a lease renewal"
		}
	}
	return "at once (no renewal seen)"
}

// noteTakeover is takenOver with one relay, where no shard can change
// owner: then it only notes that.
func (e *faultEnv) noteTakeover(ctx context.Context, before map[int]string, prefix, what string) func() (string, error) {
	if len(e.relays) < 2 {
		return func() (string, error) { return "(" + strings.TrimSuffix(prefix, "; ") + ")", nil }
	}
	return e.takenOver(ctx, before, prefix, what)
}

// attribution is which relay's proxy saw the broker place a log record,
// and when.
type attribution struct {
	relay int
	at    time.Time
}

// attribute maps each (partition, offset) of the appends to its writer.
func attribute(appends []appendRange) map[[2]int64]attribution {
	out := map[[2]int64]attribution{}
	for _, a := range appends {
		for i := range int64(a.N) {
			out[[2]int64{int64(a.Partition), a.Base + i}] = attribution{a.Relay, a.At}
		}
	}
	return out
}

// checkStale checks the raw log of one fence window w. A record of
// aggregate K is late when the fenced relay (w.Relay, the one frozen or
// split) wrote it within the window (the broker placed it between w.From
// and w.To, as the relay's proxy saw the produce response) at an offset
// after the first record of K that another relay wrote within the window
// (the successor's first record of K). A late record is stale when an
// earlier record of K on the log is of an event that committed after the
// late record's (the ledger's commit order, as the order check uses):
// whoever reads the log sees K's older event after a newer one. A late
// duplicate of the successor's last event of K is late but not stale.
func checkStale(w fenceWindow, log []delivery, attr map[[2]int64]attribution, in checkInput) fenceResult {
	res := fenceResult{fenceWindow: w}
	inWindow := func(a attribution) bool { return !a.at.Before(w.From) && !a.at.After(w.To) }
	type key struct {
		part int32
		agg  string
	}
	succ := map[key]bool{}          // another relay wrote K within the window
	earlier := map[key][]delivery{} // K's records so far, in log order
	var late []string
	for _, d := range log {
		k := key{d.Partition, d.AggregateID}
		a, ok := attr[[2]int64{int64(d.Partition), d.Offset}]
		if ok && inWindow(a) {
			if a.relay == w.Relay {
				res.Wrote++
			}
			if a.relay != w.Relay {
				succ[k] = true
			} else if succ[k] {
				res.Late++
				stale := ""
				if e, ok := in.Ledger[d.EventID]; ok {
					for _, p := range earlier[k] {
						if l, ok := in.Ledger[p.EventID]; ok && mustPrecede(in, e, l) {
							stale = fmt.Sprintf("%s of %s at %d:%d behind %s at %d:%d", d.EventID, d.AggregateID, d.Partition, d.Offset, p.EventID, p.Partition, p.Offset)
							break
						}
					}
				}
				if stale != "" {
					res.Stale++
					if len(res.Examples) < 3 {
						res.Examples = append(res.Examples, stale)
					}
				} else if len(late) < 3 {
					late = append(late, fmt.Sprintf("%s of %s at %d:%d (late, not stale)", d.EventID, d.AggregateID, d.Partition, d.Offset))
				}
			}
		}
		earlier[k] = append(earlier[k], d)
	}
	if len(res.Examples) == 0 {
		res.Examples = late
	}
	return res
}

// checkFences runs checkStale for every fence window, with the appends of
// every relay's proxy; it also returns how many records of the log no
// proxy saw placed (0 unless a produce response was lost).
func checkFences(ws []fenceWindow, log []delivery, proxies []*brokerProxy, in checkInput) ([]fenceResult, int) {
	var appends []appendRange
	for _, p := range proxies {
		appends = append(appends, p.Appends()...)
	}
	attr := attribute(appends)
	unattributed := 0
	for _, d := range log {
		if _, ok := attr[[2]int64{int64(d.Partition), d.Offset}]; !ok {
			unattributed++
		}
	}
	sorted := append([]fenceWindow(nil), ws...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].From.Before(sorted[j].From) })
	var out []fenceResult
	for _, w := range sorted {
		out = append(out, checkStale(w, log, attr, in))
	}
	return out, unattributed
}
