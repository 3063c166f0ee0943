package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// Fault names, as -scenario takes them.
const (
	faultKill      = "kill"      // SIGKILL a relay every 1-3 s, restart it 100-500 ms later
	faultStop      = "stop"      // SIGSTOP one relay for 5-6 s, then SIGCONT; measured
	faultPartition = "partition" // one partition rejects produce requests for 2-4 s
	faultAmbiguous = "ambiguous" // produce requests written after the client's timeout
	faultLongTx    = "longtx"    // a 5 s transaction on a hot aggregate, relays down at its end
	faultPoison    = "poison"    // an event larger than the broker's message.max.bytes
	faultConsumer  = "consumer"  // SIGKILL the consumer once, restart it 1 s later

	faultDBFreeze   = "dbfreeze"   // every open relay connection to PostgreSQL half-open; measured
	faultDBRefuse   = "dbrefuse"   // PostgreSQL refuses the relays' connections for 2-3 s; measured
	faultTerminate  = "terminate"  // pg_terminate_backend of every relay connection; measured
	faultBrokerDown = "brokerdown" // every partition rejects produce requests for 2-3 s; measured
	faultBrokerCut  = "brokercut"  // the active relay's network to the broker holds every byte for 5-6 s; measured

	// The faults of issue 33 (fencing and crash takeover; see fence.go).
	// netsplit is not named partition: that is the Kafka partition fault.
	faultFreeze   = "freeze"   // SIGSTOP the shard holder mid-publish (broker answering in 100 ms) for 3-4 LeaseTTLs; measured, stale records checked
	faultNetsplit = "netsplit" // the shard holder's broker link blackholed for 3-4 LeaseTTLs, then healed; measured, stale records checked
	faultCrash    = "crash"    // SIGKILL the shard holder; measured against crashTakeover
)

// allFaults returns the core tier's fault set, in the table's order.
func allFaults() []string {
	return []string{faultKill, faultStop, faultPartition, faultAmbiguous, faultLongTx, faultPoison, faultConsumer,
		faultDBFreeze, faultDBRefuse, faultTerminate, faultBrokerDown, faultBrokerCut,
		faultFreeze, faultNetsplit, faultCrash}
}

// parseScenario turns -scenario ("all", "none", or a comma-separated list
// of fault names) into a set.
func parseScenario(s string) (map[string]bool, error) {
	set := map[string]bool{}
	switch s {
	case "", "all":
		for _, f := range allFaults() {
			set[f] = true
		}
		return set, nil
	case "none":
		return set, nil
	}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		known := false
		for _, k := range allFaults() {
			known = known || k == f
		}
		if !known {
			return nil, fmt.Errorf("unknown fault %q in -scenario (known: all, none, %s)", f, strings.Join(allFaults(), ", "))
		}
		set[f] = true
	}
	return set, nil
}

// longTxHold is how long the long-running transaction stays open.
const longTxHold = 5 * time.Second

// faultCounts is what the fault schedule did.
type faultCounts struct {
	Kills, Stops, PartitionWindows, AmbiguousArmed, Outages, LongTx, Poison, ConsumerKills int
	// DBFreezes, DBRefusals and Terminations are the database faults of
	// the relays, BrokerOutages the full broker outages, BrokerCuts the
	// relays cut off from the broker alone.
	DBFreezes, DBRefusals, Terminations, BrokerOutages, BrokerCuts int
	// Freezes, Netsplits and Crashes are issue 33's faults of the relay
	// holding the shards.
	Freezes, Netsplits, Crashes int
	// Skipped counts kills and ambiguous writes not injected because a
	// measured fault was in progress.
	Skipped int
	// Rejected, Refused and Delayed are the broker's own counts of produce
	// requests it rejected for one partition, refused in a full outage, and
	// wrote late.
	Rejected, Refused, Delayed int64
	// Errors are failures of the injection itself.
	Errors []string
}

// total is the number of faults injected, counting each rejected or
// delayed produce request once.
func (f faultCounts) total() int {
	return f.Kills + f.Stops + f.Outages + f.LongTx + f.Poison + f.ConsumerKills + int(f.Rejected) + int(f.Delayed) +
		f.DBFreezes + f.DBRefusals + f.Terminations + f.BrokerCuts + f.Freezes + f.Netsplits + f.Crashes
}

// dbFaults counts the database faults of the relays.
func (f faultCounts) dbFaults() int { return f.DBFreezes + f.DBRefusals + f.Terminations }

func (f faultCounts) String() string {
	return fmt.Sprintf("kill×%d stop×%d outage×%d partition-errors×%d (%d requests rejected) broker-down×%d (%d requests refused) broker-cut×%d ambiguous×%d (%d written late) long-tx×%d poison×%d consumer-kill×%d db-freeze×%d db-refuse×%d terminate×%d freeze×%d netsplit×%d crash×%d; %d kills or ambiguous writes skipped during measured faults",
		f.Kills, f.Stops, f.Outages, f.PartitionWindows, f.Rejected, f.BrokerOutages, f.Refused, f.BrokerCuts, f.AmbiguousArmed, f.Delayed, f.LongTx, f.Poison, f.ConsumerKills,
		f.DBFreezes, f.DBRefusals, f.Terminations, f.Freezes, f.Netsplits, f.Crashes, f.Skipped)
}

// action is one step of the fault schedule.
type action struct {
	at   time.Duration
	name string
	do   func(ctx context.Context) error
}

// faultEnv is what the schedule acts on.
type faultEnv struct {
	relays   []*proc
	consumer *proc
	control  string // broker control channel base URL
	workload *workload
	db       *gorm.DB
	ob       *outbox
	proxy    *runtimetest.Proxy // the relays' way to PostgreSQL
	// brokerProxies are the relays' ways to the broker, one per relay.
	brokerProxies []*brokerProxy
	relayApp      string // the relays' application_name
	kind          string // the relays' kind (-relay)
	slot          string // the CDC relays' slot
	partitions    int
	writeTO       time.Duration
	maxMsg        int
	start         time.Time // the load phase's start
	logf          func(format string, args ...any)

	// excl is held by each measured fault and by the long transaction's
	// relay outage; shared counts the faults running whose effect would
	// delay a measured fault's probes (kills, ambiguous writes, the
	// partition, the poison message) until that effect is over. Shared
	// faults overlap each other but never an exclusive one, so that each
	// bound is measured against its own fault alone.
	excl   chan struct{} // a one-slot semaphore
	shared sync.WaitGroup

	mu       sync.Mutex
	counts   faultCounts
	liveness []livenessResult
	fences   []fenceWindow
}

// settle is how long a killed relay's shards take to be taken over: its
// leases lapse (LeaseTTL after the last renewal) and the next claim takes
// them.
const settle = relayLeaseTTL + relayLeaseTTL/5 + relayPollInterval

// plan derives the fault schedule of a load phase of length d from rng.
// Every fault ends by the time the last action returns. The faults that
// hold excl run one after the other, in an order and at planned times
// drawn from rng (a fault starts late when the previous one overran); the
// shared faults (kills, ambiguous writes, the partition, the poison) due
// while one of them runs wait for it up to maxWait; kills and ambiguous
// writes are skipped after that.
func (e *faultEnv) plan(rng *rand.Rand, faults map[string]bool, d time.Duration) []action {
	var acts []action
	at := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(d))
	}
	uniform := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	n := len(e.relays)

	// The sequence of exclusive faults.
	var seq []action
	if faults[faultStop] {
		stopped := n - 1
		hold := uniform(5*time.Second, 6*time.Second).Round(time.Millisecond)
		seq = append(seq, e.measured(fmt.Sprintf("SIGSTOP relay-%d for %v", stopped, hold), e.stop(stopped, hold)))
	}
	if faults[faultLongTx] {
		seq = append(seq, action{0, "long transaction on hot-0, every relay SIGKILLed 1.5s in for 5s", e.longTx})
	}
	if faults[faultPartition] {
		p := rng.IntN(e.partitions)
		hold := uniform(2*time.Second, 4*time.Second).Round(time.Millisecond)
		acts = append(acts, action{at(0.3, 0.5), fmt.Sprintf("partition %d rejects produce for %v", p, hold), e.sharedFault(0, e.reject(p, hold))})
	}
	if faults[faultBrokerDown] {
		hold := uniform(2*time.Second, 3*time.Second).Round(time.Millisecond)
		seq = append(seq, e.measured(fmt.Sprintf("every partition rejects produce for %v", hold), e.brokerDown(hold)))
	}
	if faults[faultDBFreeze] {
		seq = append(seq, e.measured("every relay connection to PostgreSQL half-open", e.dbFreeze))
	}
	if faults[faultBrokerCut] {
		cut := n - 1
		hold := uniform(5*time.Second, 6*time.Second).Round(time.Millisecond)
		seq = append(seq, e.measured(fmt.Sprintf("the active relay's network to the broker holds every byte for %v", hold), e.brokerCut(cut, hold)))
	}
	if faults[faultDBRefuse] {
		hold := uniform(2*time.Second, 3*time.Second).Round(time.Millisecond)
		seq = append(seq, e.measured(fmt.Sprintf("PostgreSQL refuses the relays for %v", hold), e.dbRefuse(hold)))
	}
	if faults[faultTerminate] {
		seq = append(seq, e.measured("pg_terminate_backend of every relay connection", e.terminate))
	}
	if faults[faultFreeze] {
		hold := uniform(3*relayLeaseTTL, 4*relayLeaseTTL).Round(time.Millisecond)
		seq = append(seq, e.measured(fmt.Sprintf("SIGSTOP the shard holder mid-publish for %v (broker answering in %v)", hold, slowProduce), e.freeze(n-1, hold)))
	}
	if faults[faultNetsplit] {
		hold := uniform(3*relayLeaseTTL, 4*relayLeaseTTL).Round(time.Millisecond)
		seq = append(seq, e.measured(fmt.Sprintf("the shard holder's broker link blackholed mid-publish for %v", hold), e.netsplit(n-1, hold)))
	}
	if faults[faultCrash] {
		seq = append(seq, e.measured("SIGKILL the shard holder", e.crash(n-1)))
	}
	rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
	if len(seq) > 0 {
		slot := (d - 4*time.Second) / time.Duration(len(seq))
		for i := range seq {
			seq[i].at = 2*time.Second + time.Duration(i)*slot + uniform(0, slot/4)
			seq[i].do = e.exclusive(seq[i].name, seq[i].do)
		}
		acts = append(acts, seq...)
	}

	if faults[faultKill] {
		for t := 2 * time.Second; ; {
			t += uniform(time.Second, 3*time.Second)
			if t > d-2*time.Second {
				break
			}
			r := rng.IntN(n)
			acts = append(acts, action{t, fmt.Sprintf("SIGKILL relay-%d", r), e.kill(r, uniform(100*time.Millisecond, 500*time.Millisecond))})
		}
	}
	if faults[faultAmbiguous] {
		for range 3 {
			acts = append(acts, action{at(0.1, 0.9), "next produce request written late", e.delay()})
		}
	}
	if faults[faultPoison] {
		acts = append(acts, action{at(0.1, 0.5), "poison message on poison-0", e.sharedFault(0, e.poison)})
	}
	if faults[faultConsumer] {
		acts = append(acts, action{at(0.3, 0.7), "SIGKILL consumer", e.killConsumer})
	}
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].at < acts[j].at })
	return acts
}

// run executes the schedule from start; each action runs in its own
// goroutine at its time. It returns when every action has returned.
func (e *faultEnv) run(ctx context.Context, start time.Time, acts []action, logf func(format string, args ...any)) {
	var wg sync.WaitGroup
	for _, a := range acts {
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(a.at))):
			}
			logf("%6.2fs fault: %s", time.Since(start).Seconds(), a.name)
			if err := a.do(ctx); err != nil {
				e.mu.Lock()
				e.counts.Errors = append(e.counts.Errors, fmt.Sprintf("%s: %v", a.name, err))
				e.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func (e *faultEnv) add(f func(*faultCounts)) {
	e.mu.Lock()
	f(&e.counts)
	e.mu.Unlock()
}

// exclusive runs do holding excl (see faultEnv), logging when it starts
// late because another exclusive fault was running.
func (e *faultEnv) exclusive(name string, do func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		due := time.Now()
		select {
		case e.excl <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-e.excl }()
		e.shared.Wait() // the shared faults' effects are over
		if late := time.Since(due); late > 100*time.Millisecond {
			e.logf("%6.2fs   started %v late: %s", time.Since(e.start).Seconds(), late.Round(time.Millisecond), name)
		}
		return do(ctx)
	}
}

// maxWait is how long a kill or an ambiguous write waits for a measured
// fault to end before it is skipped.
const maxWait = 5 * time.Second

// sharedFault runs do as a shared fault (see faultEnv) once no exclusive
// fault runs; when one runs for longer than wait (0: no limit), do is
// skipped.
func (e *faultEnv) sharedFault(wait time.Duration, do func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var timeout <-chan time.Time
		if wait > 0 {
			timeout = time.After(wait)
		}
		select {
		case e.excl <- struct{}{}:
		case <-timeout:
			e.add(func(c *faultCounts) { c.Skipped++ })
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		e.shared.Add(1) // under excl: an exclusive fault's Wait comes after it
		<-e.excl
		defer e.shared.Done()
		return do(ctx)
	}
}

// kill SIGKILLs relay r and restarts it after down; it is a shared fault
// until the killed relay's shards have been taken over (settle).
func (e *faultEnv) kill(r int, down time.Duration) func(context.Context) error {
	return e.sharedFault(maxWait, func(context.Context) error {
		e.add(func(c *faultCounts) { c.Kills++ })
		if err := e.relays[r].kill(); err != nil {
			return err
		}
		time.Sleep(down) // the fault: the relay stays down this long
		err := e.relays[r].restart()
		time.Sleep(settle) // the fault's effect: its shards wait for their leases to lapse
		return err
	})
}

func (e *faultEnv) outage(down bool) error {
	if down {
		e.add(func(c *faultCounts) { c.Outages++ })
	}
	for _, p := range e.relays {
		var err error
		if down {
			err = p.kill()
		} else {
			err = p.restart()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// longTx holds a transaction on a hot aggregate open for longTxHold, and
// kills every relay from 1.5 s in until 1.5 s after its end (so it commits
// while no relay runs, below ids already published).
func (e *faultEnv) longTx(ctx context.Context) error {
	e.add(func(c *faultCounts) { c.LongTx++ })
	begin := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- e.workload.longTx(ctx, e.workload.hot[0], longTxHold) }()
	time.Sleep(1500 * time.Millisecond) // the fault's schedule
	e.logf("%6.2fs fault: SIGKILL every relay (outage)", time.Since(e.start).Seconds())
	err := e.outage(true)
	time.Sleep(time.Until(begin.Add(longTxHold + 1500*time.Millisecond))) // the fault's schedule
	e.logf("%6.2fs fault: restart every relay", time.Since(e.start).Seconds())
	err = errors.Join(err, e.outage(false), <-errc)
	time.Sleep(settle) // the killed relays' leases lapse
	return err
}

func (e *faultEnv) poison(ctx context.Context) error {
	e.add(func(c *faultCounts) { c.Poison++ })
	return e.workload.poisonTx(ctx, "poison-0", 2*e.maxMsg)
}

func (e *faultEnv) killConsumer(context.Context) error {
	e.add(func(c *faultCounts) { c.ConsumerKills++ })
	if err := e.consumer.kill(); err != nil {
		return err
	}
	time.Sleep(time.Second) // the fault: the consumer stays down this long
	return e.consumer.restart()
}

// reject makes partition p reject produce requests for hold.
func (e *faultEnv) reject(p int, hold time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		e.add(func(c *faultCounts) { c.PartitionWindows++ })
		err := e.post(ctx, "/reject", url.Values{"partition": {fmt.Sprint(p)}, "for": {hold.String()}})
		time.Sleep(hold) // the fault's window
		return err
	}
}

// delay makes the broker write the next produce request after the relays'
// write timeout; it is a shared fault until that request has surely come
// and gone.
func (e *faultEnv) delay() func(context.Context) error {
	return e.sharedFault(maxWait, func(ctx context.Context) error {
		e.add(func(c *faultCounts) { c.AmbiguousArmed++ })
		sleep := e.writeTO + e.writeTO/2
		err := e.post(ctx, "/delay", url.Values{"n": {"1"}, "sleep": {sleep.String()}})
		time.Sleep(sleep + time.Second) // the fault's effect
		return err
	})
}

// measure commits the probes of fault (right after the fault began at
// faultAt), waits for hold to pass from faultAt and calls heal, meanwhile
// waits until every probe is published or the bound (the relays' settings
// plus healthy, the control probe's time before the fault: see calibrate)
// plus 5 s passed, and records the result. check, when set, runs as soon as the probes are
// published (or the wait gave up) and adds its note and error.
func (e *faultEnv) measure(ctx context.Context, healthy time.Duration, fault string, faultAt time.Time, hold time.Duration, heal func() error, check func() (string, error)) error {
	bound, from := livenessBound(fault, len(e.relays), e.ob.sdb.name(), e.kind)
	bound += healthy
	l := livenessResult{Fault: fault, At: faultAt.Sub(e.start), Held: hold, Bound: bound, Healthy: healthy, From: from}
	ids, err := e.workload.probe(ctx, fmt.Sprintf("probe-%s-%d", fault, faultAt.Sub(e.start).Milliseconds()))
	if err != nil {
		return err
	}
	healAt := faultAt.Add(hold)
	ref := faultAt
	if from == "heal" {
		ref = healAt
	}
	type published struct {
		at         time.Time
		ok         bool
		note, cerr string
	}
	pc := make(chan published, 1)
	go func() {
		at, ok := e.ob.waitPublished(ctx, e.db, ids, ref.Add(bound+5*time.Second))
		p := published{at: at, ok: ok}
		if check != nil {
			var err error
			if p.note, err = check(); err != nil {
				p.cerr = err.Error()
			}
		}
		pc <- p
	}()
	time.Sleep(time.Until(healAt)) // the fault's window
	var herr error
	if heal != nil {
		e.logf("%6.2fs fault healed: %s", time.Since(e.start).Seconds(), fault)
		herr = heal()
	}
	p := <-pc
	l.Recovered, l.Published, l.Note, l.Err = p.at.Sub(ref), p.ok, p.note, p.cerr
	e.logf("%6.2fs %s: probes published %v after the %s (bound %v, control probe %v) %s", time.Since(e.start).Seconds(),
		fault, l.Recovered.Round(time.Millisecond), from, bound.Round(time.Millisecond), l.Healthy.Round(time.Millisecond), l.Note)
	e.mu.Lock()
	e.liveness = append(e.liveness, l)
	e.mu.Unlock()
	return herr
}

// stop SIGSTOPs relay r for hold and measures the takeover of its shards.
// With several relays it checks that the takeover happened: some shards
// changed owner between the SIGSTOP and the probes' publication (a stopped
// relay that held no shard would prove nothing).
func (e *faultEnv) stop(r int, hold time.Duration) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.Stops++ })
		r, before, err := e.shardHolder(ctx, r)
		if err != nil {
			return err
		}
		if err := e.relays[r].signal(syscall.SIGSTOP); err != nil {
			return err
		}
		var check func() (string, error)
		if len(e.relays) > 1 {
			check = e.takenOver(ctx, before, "", fmt.Sprintf("relay-%d was stopped: its takeover", r))
		}
		err = e.measure(ctx, healthy, faultStop, time.Now(), hold, func() error { return e.relays[r].signal(syscall.SIGCONT) }, check)
		time.Sleep(settle) // the resumed relay finds its leases lost
		return err
	}
}

// brokerCut holds every byte between relay r (a relay holding shards,
// when several run) and the broker, on open and new connections, for
// hold: a network partition that leaves the relay its database, so its
// leases never expire. It measures the takeover of its shards, which the
// relay hands over after relay.Config.HandOverAfter, and with several
// relays checks that some shards changed owner. At the end the held bytes
// are delivered, as a healed network delivers retransmitted segments: the
// produce requests the relay gave up on reach the broker late
// (duplicates, counted in the bound).
func (e *faultEnv) brokerCut(r int, hold time.Duration) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.BrokerCuts++ })
		r, before, err := e.shardHolder(ctx, r)
		if err != nil {
			return err
		}
		proxy := e.brokerProxies[r]
		proxy.Pause()
		var check func() (string, error)
		if len(e.relays) > 1 && e.kind != relayCDC { // a CDC relay keeps its slot
			check = e.takenOver(ctx, before, fmt.Sprintf("relay-%d cut off; ", r), fmt.Sprintf("relay-%d was cut off from the broker: its hand-over", r))
		}
		err = e.measure(ctx, healthy, faultBrokerCut, time.Now(), hold, func() error { proxy.Resume(); return nil }, check)
		time.Sleep(settle)
		return err
	}
}

// shardHolder reads the lease owners (shard to owner) and returns the
// relay a fault aimed at relay r should hit: with several relays (of which
// some, with MaxActiveRelays, hold no shard) one that holds shards, r when
// it does, so that the takeover is exercised.
func (e *faultEnv) shardHolder(ctx context.Context, r int) (int, map[int]string, error) {
	before, err := e.owners(ctx)
	if err != nil {
		return 0, nil, err
	}
	if len(e.relays) > 1 {
		if r, err = e.holding(r, before); err != nil {
			return 0, nil, err
		}
	}
	return r, before, nil
}

// takenOver returns a measured fault's check that some shards of before
// (shard to owner, read when the fault began) changed owner since: the
// fault's takeover, which what names ("relay-1 was stopped: its
// takeover"), was exercised. The note starts with prefix.
func (e *faultEnv) takenOver(ctx context.Context, before map[int]string, prefix, what string) func() (string, error) {
	return func() (string, error) {
		after, err := e.owners(ctx)
		if err != nil {
			return "", err
		}
		moved := 0
		for s, o := range before {
			if after[s] != o {
				moved++
			}
		}
		note := fmt.Sprintf("(%s%d of %d shards changed owner)", prefix, moved, len(before))
		if moved == 0 {
			return note, fmt.Errorf("no shard changed owner while %s was not exercised", what)
		}
		return note, nil
	}
}

// holding returns r when relay r's current process holds a shard of
// owners (shard to owner), or else the first relay that does (r when
// none does).
func (e *faultEnv) holding(r int, owners map[int]string) (int, error) {
	held := map[string]bool{}
	for _, o := range owners {
		held[o] = true
	}
	first := -1
	for i := range e.relays {
		o, err := e.ownerOf(i)
		if err != nil {
			return 0, err
		}
		if held[o] {
			if i == r {
				return r, nil
			}
			if first < 0 {
				first = i
			}
		}
	}
	if first < 0 {
		return r, nil
	}
	return first, nil
}

// brokerDown makes every partition reject produce requests for hold, and
// checks that the messages that failed only because of it counted no
// attempt.
func (e *faultEnv) brokerDown(hold time.Duration) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.BrokerOutages++ })
		var since time.Time
		if err := e.db.WithContext(ctx).Raw(e.ob.sdb.clockSQL()).Scan(&since).Error; err != nil {
			return fmt.Errorf("database clock: %w", err)
		}
		at := time.Now()
		if err := e.post(ctx, "/reject", url.Values{"partition": {"-1"}, "for": {hold.String()}}); err != nil {
			return err
		}
		return e.measure(ctx, healthy, faultBrokerDown, at, hold, func() error { return nil }, func() (string, error) {
			// Any failure recorded on a message committed during the
			// outage: nothing else fails then (measured faults run
			// alone), and kafka-go may report NOT_ENOUGH_REPLICAS or a
			// timeout of its retries, depending on timing.
			rows, counted, err := e.ob.outageAttempts(ctx, e.db, since, "")
			note := fmt.Sprintf("(%d messages committed during the outage failed with it, %d counted more than one attempt)", rows, counted)
			switch {
			case err != nil:
				return note, err
			case counted > 0:
				return note, fmt.Errorf("%d messages counted attempts again and again during a full broker outage", counted)
			case rows == 0:
				// The relays' writes outlived the outage (kafka-go
				// retried them through it): nothing to check.
				note += " (no write failed within the outage)"
			}
			return note, nil
		})
	}
}

// dbFreeze makes every open relay connection to PostgreSQL half-open.
func (e *faultEnv) dbFreeze(ctx context.Context, healthy time.Duration) error {
	e.add(func(c *faultCounts) { c.DBFreezes++ })
	at := time.Now()
	n := e.proxy.Blackhole()
	return e.measure(ctx, healthy, faultDBFreeze, at, 0, nil, func() (string, error) {
		note := fmt.Sprintf("(%d connections frozen)", n)
		if n == 0 {
			return note, errors.New("no relay connection to freeze")
		}
		return note, nil
	})
}

// dbRefuse closes every relay connection to PostgreSQL and refuses new
// ones for hold.
func (e *faultEnv) dbRefuse(hold time.Duration) measuredFault {
	return func(ctx context.Context, healthy time.Duration) error {
		e.add(func(c *faultCounts) { c.DBRefusals++ })
		at := time.Now()
		e.proxy.Refuse()
		return e.measure(ctx, healthy, faultDBRefuse, at, hold, func() error { e.proxy.Accept(); return nil }, nil)
	}
}

// terminate ends every relay connection on the server's side
// (pg_terminate_backend of the relays' application_name on PostgreSQL,
// KILL CONNECTION of the proxy's sessions on MySQL).
func (e *faultEnv) terminate(ctx context.Context, healthy time.Duration) error {
	e.add(func(c *faultCounts) { c.Terminations++ })
	at := time.Now()
	n, err := e.ob.sdb.terminate(ctx, e.db, e.relayApp, e.proxy)
	if err != nil {
		return err
	}
	return e.measure(ctx, healthy, faultTerminate, at, 0, nil, func() (string, error) {
		note := fmt.Sprintf("(%d backends terminated)", n)
		if n == 0 {
			return note, errors.New("no relay backend to terminate")
		}
		return note, nil
	})
}

func (e *faultEnv) post(ctx context.Context, path string, q url.Values) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.control+path+"?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("control request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control %s: %w", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("control %s: %s", path, resp.Status)
	}
	return nil
}

// owners reads who holds what: shard to lease owner for polling relays,
// and for CDC relays shard 0 to the slot's holder (the application_name
// of its stream), none while no relay streams.
func (e *faultEnv) owners(ctx context.Context) (map[int]string, error) {
	if e.kind != relayCDC {
		return e.ob.leaseOwners(ctx, e.db)
	}
	holder, err := slotHolder(ctx, e.db, e.slot)
	if err != nil || holder == "" {
		return map[int]string{}, err
	}
	return map[int]string{0: holder}, nil
}

// ownerOf returns what owners names relay i's current process by: its
// lease owner id (from its log), or its CDC application_name.
func (e *faultEnv) ownerOf(i int) (string, error) {
	if e.kind == relayCDC {
		return cdcOwner(e.relayApp, e.relays[i].name), nil
	}
	return e.relays[i].owner()
}
