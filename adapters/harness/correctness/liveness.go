package main

// Liveness: the faults whose recovery time the suite measures, their
// bounds, the database fault proxy of the relays, and the probes.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// The relays' settings that the liveness bounds are made of.
const (
	relayLeaseTTL     = 2 * time.Second // sqlstore.StoreConfig.LeaseTTL; renewed every LeaseTTL/5
	relayRetryDelay   = 100 * time.Millisecond
	relayPollInterval = 200 * time.Millisecond
	relayMaxBackoff   = time.Second
	relayStoreTimeout = 2 * time.Second // relay.Config.StoreTimeout (default 10s)
	// relayHandOverAfter is relay.Config.HandOverAfter (default 15s, as
	// the default LeaseTTL).
	relayHandOverAfter = relayLeaseTTL
	// standbyLook is how often a standby looks for shards nobody holds
	// (sqlstore's standbyEvery).
	standbyLook = 250 * time.Millisecond
	// boundSlack covers the suite's own measurement: probes are polled
	// every 50 ms on a 2-core machine shared by the writers, the broker,
	// the consumer and the relays.
	boundSlack = time.Second
	// mysqlSlack is added on MySQL and MariaDB, where a recovery takes more
	// round trips on a loaded machine: relays poll (no LISTEN/NOTIFY), a
	// lease renewal is five to seven statements instead of three (no
	// UPDATE ... RETURNING, and the session guard set and restored), and
	// the claim's window query scans more. Core-tier runs in CI (2 cores,
	// load average 12 – 18) recovered up to 1.7 s past the bounds above;
	// nothing was ever lost, ghosted or reordered.
	mysqlSlack = 2 * time.Second
	// relayStartup is how long a relay process takes to start and connect
	// (crash with one relay restarts it).
	relayStartup = 500 * time.Millisecond
	// crashSlack is crash's margin instead of boundSlack: with the suite's
	// short LeaseTTL, a takeover that waits for the leases to expire
	// (LeaseTTL after the renewal right before the kill, plus a look and a
	// poll: about 2.4 s) must fail crashTakeover + PollInterval + margin,
	// so the margin is below LeaseTTL - crashTakeover - look. The control
	// probe's time is added as to every bound.
	crashSlack = 500 * time.Millisecond
)

// livenessBound returns the bound of a measured fault with relays relay
// processes on database db ("postgres" or "mysql"), and from what it is
// measured: "fault" (the fault's start) or "heal" (its end).
func livenessBound(fault string, relays int, db, kind string) (time.Duration, string) {
	if kind == relayCDC {
		return cdcBound(fault, relays)
	}
	bound, from := baseBound(fault, relays)
	if db == "mysql" && bound > 0 && fault != faultCrash { // issue 33's crash bound holds on both
		bound += mysqlSlack
	}
	return bound, from
}

// baseBound is livenessBound on PostgreSQL.
func baseBound(fault string, relays int) (time.Duration, string) {
	renewal := relayLeaseTTL / 5
	switch {
	case fault == faultStop && relays == 1:
		// No other relay can take over: the relay resumes after SIGCONT,
		// finds its leases lapsed and takes them again at its next claim.
		return relayMaxBackoff + relayStoreTimeout + relayPollInterval + boundSlack, "heal"
	case fault == faultStop:
		// The stopped relay's leases expire LeaseTTL after its last
		// renewal (at most one renewal interval before the SIGSTOP); another
		// relay takes its shards at its next claim (a poll).
		return relayLeaseTTL + renewal + relayPollInterval + boundSlack, "fault"
	case fault == faultDBFreeze:
		// The call in flight on a frozen connection fails after
		// StoreTimeout, and so may a lease renewal and one more call on
		// another frozen pooled connection; by then the relay's leases may
		// have lapsed and are taken again, by it or another relay, within a
		// lease.
		return 3*relayStoreTimeout + relayLeaseTTL + boundSlack, "fault"
	case fault == faultDBRefuse:
		// The relays back off at most MaxBackoff between attempts, then
		// one claim (at most StoreTimeout) publishes.
		return relayMaxBackoff + relayStoreTimeout + relayPollInterval + boundSlack, "heal"
	case fault == faultTerminate:
		// A terminated backend fails its next call at once, and the pool
		// then replaces it; each of the relay's pooled connections (4) may
		// fail one call, and the relay backs off after each (50, 100, 200,
		// 400 ms from MinBackoff 50ms: less than 2×MaxBackoff) before a
		// claim on a new connection publishes.
		return 2*relayMaxBackoff + relayPollInterval + boundSlack, "fault"
	case fault == faultBrokerCut && relays == 1:
		// No other relay to hand the shards to: as a broker outage.
		return relayMaxBackoff + relayRetryDelay + relayPollInterval + writeTimeout + boundSlack, "heal"
	case fault == faultBrokerCut:
		// The cut relay's streak of failed rounds begins with the fault
		// (the round in flight, at the latest); its publishes end by
		// HandOverAfter after that, and it hands its shards over after
		// at most one backoff. A standby takes them at its next look
		// and publishes at its next claim (a poll).
		return relayHandOverAfter + relayMaxBackoff + standbyLook + relayPollInterval + boundSlack, "fault"
	case fault == faultFreeze && relays == 1:
		// As stop with one relay: it resumes and takes its shards again.
		return relayMaxBackoff + relayStoreTimeout + relayPollInterval + boundSlack, "heal"
	case fault == faultFreeze:
		// As stop: the frozen relay's leases expire LeaseTTL after its last
		// renewal (at most a renewal interval before the SIGSTOP); a
		// standby finds them at its next look and publishes at its next
		// claim (a poll).
		return relayLeaseTTL + renewal + standbyLook + relayPollInterval + boundSlack, "fault"
	case fault == faultNetsplit && relays == 1:
		// As brokercut with one relay: no one to hand over to.
		return relayMaxBackoff + relayRetryDelay + relayPollInterval + writeTimeout + boundSlack, "heal"
	case fault == faultNetsplit:
		// As brokercut: the split relay keeps its database, so its leases
		// do not expire; it hands its shards over HandOverAfter into its
		// streak of failed rounds (plus a backoff), a standby takes them at
		// its next look and publishes at its next claim. (Were the relay cut
		// off from the database too, its leases would expire after LeaseTTL
		// plus a renewal interval, which is shorter than this.)
		return relayHandOverAfter + relayMaxBackoff + standbyLook + relayPollInterval + boundSlack, "fault"
	case fault == faultCrash && relays == 1:
		// The relay restarts at once (a process start, relayStartup) and
		// takes its predecessor's shards once the database ended the dead
		// session.
		return crashTakeover + relayStartup + relayPollInterval + crashSlack, "fault"
	case fault == faultCrash:
		// The database ends the dead relay's session, and a standby takes
		// its shards within crashTakeover, then publishes at its next
		// claim (a poll).
		return crashTakeover + relayPollInterval + crashSlack, "fault"
	case fault == faultBrokerDown:
		// Nothing is published, so no attempt is counted and no retry
		// delay grows: after the broker is back, the relay's backoff (at
		// most MaxBackoff), the messages' RetryDelay and one produce (at
		// most the write timeout) publish them.
		return relayMaxBackoff + relayRetryDelay + relayPollInterval + writeTimeout + boundSlack, "heal"
	}
	return 0, ""
}

// controlDeadline bounds a control probe's publication (see calibrate):
// long enough for a relay starved of CPU and disk beside other
// race-instrumented test binaries in CI (batches of 10 events took up to
// 3 s there, behind a backlog of up to the writers' cap), short enough to
// fail a run whose relays do not publish at all.
const controlDeadline = 20 * time.Second

// measuredFault injects a measured fault and measures the recovery (see
// faultEnv.measure); healthy is the control probe's time before it.
type measuredFault func(ctx context.Context, healthy time.Duration) error

// measured returns the schedule's action for the measured fault do, named
// name: once it holds excl (see faultEnv.exclusive), a control probe
// calibrates its bound before do injects the fault.
func (e *faultEnv) measured(name string, do measuredFault) action {
	return action{name: name, do: func(ctx context.Context) error {
		healthy, err := e.calibrate(ctx)
		if err != nil {
			return err // the schedule names the fault
		}
		return do(ctx, healthy)
	}}
}

// calibrate commits a control probe (one event on a fresh aggregate of
// every shard, as a measured fault's probes) while no fault runs, and
// returns how long its events took, from the start of its transaction, to
// be marked published: the commit-to-publish time on the machine as loaded
// right then. A measured
// fault's bound adds it (see measure): the relays' settings bound
// how long a fault keeps them from publishing; how long the probes then
// take is that time on a healthy system. On a quiet machine it is a few
// hundred milliseconds; in CI, where go test runs other race-instrumented
// test packages beside the suite, it grows with the load, and the bound
// with it.
func (e *faultEnv) calibrate(ctx context.Context) (time.Duration, error) {
	// Timed from before the probe's transaction, as a measured fault's
	// probes are (from the fault, before they are committed): the commit of
	// 64 events with their ledger rows is part of what the probes take, and
	// on a loaded machine it can take hundreds of milliseconds.
	start := time.Now()
	ids, err := e.workload.probe(ctx, fmt.Sprintf("control-%d", time.Since(e.start).Milliseconds()))
	if err != nil {
		return 0, err
	}
	at, ok := e.ob.waitPublished(ctx, e.db, ids, start.Add(controlDeadline))
	if !ok {
		return 0, fmt.Errorf("control probe before the fault: not published within %v while no fault ran", controlDeadline)
	}
	return at.Sub(start), nil
}

// livenessResult is one measured fault.
type livenessResult struct {
	Fault string
	At    time.Duration // the fault's start, since the load started
	Held  time.Duration // how long the fault lasted (0: instantaneous)
	// Bound is the stated bound, measured from From ("fault" or "heal"):
	// the one of the relays' settings plus Healthy.
	Bound time.Duration
	// Healthy is the control probe's publication time right before the
	// fault (see faultEnv.calibrate).
	Healthy time.Duration
	From    string
	// Recovered is when the last probe was published, measured from
	// From; Published is false when not every probe was published before
	// the measurement gave up (Bound + 5 s).
	Recovered time.Duration
	Published bool
	// Note is what else the fault checked (terminated backends, attempts).
	Note string
	// Err is a failure of the check itself or of its extra assertion.
	Err string
}

func (l livenessResult) failure() string {
	switch {
	case l.Err != "":
		return fmt.Sprintf("%s at %.1fs: %s", l.Fault, l.At.Seconds(), l.Err)
	case !l.Published:
		return fmt.Sprintf("%s at %.1fs: events committed after the fault not on the broker %v after the %s (bound %v)",
			l.Fault, l.At.Seconds(), l.Recovered.Round(time.Millisecond), l.From, l.Bound.Round(time.Millisecond))
	case l.Recovered > l.Bound:
		return fmt.Sprintf("%s at %.1fs: recovered %v after the %s, bound %v",
			l.Fault, l.At.Seconds(), l.Recovered.Round(time.Millisecond), l.From, l.Bound.Round(time.Millisecond))
	}
	return ""
}

// probe commits one note on a fresh aggregate of each shard of the outbox,
// in one transaction with their ledger rows, and returns the events' ids:
// whichever relay owns a shard, one probe waits on it.
func (w *workload) probe(ctx context.Context, name string) ([]string, error) {
	var ids []string
	err := w.inTx(context.WithoutCancel(ctx), -3, "probe", func(tx *gorm.DB, m *txMeta) error {
		ids = ids[:0]
		for _, agg := range probeAggregates(name) {
			got, err := w.ob.enqueue(tx, agg, NewNoted(runtime.SystemClock{}, -3, "probe"))
			if err != nil {
				return err
			}
			if err := writeLedger(tx, m, agg, got); err != nil {
				return err
			}
			for _, id := range got {
				ids = append(ids, id.String())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", name, err)
	}
	return ids, nil
}

// waitPublished polls the outbox every 50 ms until every event of ids is
// marked published (which the relay does only after the broker acked it)
// or until the deadline; it returns when that happened and whether it did.
func (o *outbox) waitPublished(ctx context.Context, db *gorm.DB, ids []string, deadline time.Time) (time.Time, bool) {
	for {
		n, err := o.countPublished(ctx, db, ids)
		now := time.Now()
		if err == nil && n == int64(len(ids)) {
			return now, true
		}
		if now.After(deadline) || ctx.Err() != nil {
			return now, false
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// proxyTB adapts the driving process to runtimetest.StartProxy, which takes
// a testing.TB only for Helper, Fatalf and Cleanup.
type proxyTB struct {
	testing.TB // nil: any other method panics
	mu         sync.Mutex
	cleanups   []func()
}

func (p *proxyTB) Helper() {}

func (p *proxyTB) Fatalf(format string, args ...any) {
	panic(proxyFatal{fmt.Errorf(format, args...)})
}

func (p *proxyTB) Cleanup(f func()) {
	p.mu.Lock()
	p.cleanups = append(p.cleanups, f)
	p.mu.Unlock()
}

// close runs the cleanups, last first.
func (p *proxyTB) close() {
	p.mu.Lock()
	fs := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

type proxyFatal struct{ err error }

// startDBProxy starts a fault proxy to the database of dsn and returns it,
// the relays' DSN (through the proxy, named app where the database can),
// and a function that stops it.
func startDBProxy(sdb suiteDB, dsn, app string) (proxy *runtimetest.Proxy, relayDSN string, stop func(), err error) {
	target, err := sdb.proxyTarget(dsn)
	if err != nil {
		return nil, "", nil, err
	}
	err = withProxyTB(func(tb *proxyTB) error {
		proxy = runtimetest.StartProxy(tb, target)
		stop = tb.close
		relayDSN, err = sdb.relayDSN(dsn, proxy.Addr(), app)
		return err
	})
	if err != nil {
		return nil, "", nil, err
	}
	return proxy, relayDSN, stop, nil
}

// withProxyTB runs start with a proxyTB for runtimetest.StartProxy; a
// proxy that fails to start (its Fatalf panics) or an error from start
// closes every proxy started and returns the error.
func withProxyTB(start func(tb *proxyTB) error) (err error) {
	tb := &proxyTB{}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(proxyFatal)
			if !ok {
				panic(r)
			}
			err = f.err
		}
		if err != nil {
			tb.close()
		}
	}()
	return start(tb)
}
