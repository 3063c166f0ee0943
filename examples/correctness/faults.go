package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Fault names, as -scenario takes them.
const (
	faultKill      = "kill"      // SIGKILL a relay every 1-3 s, restart it 100-500 ms later
	faultStop      = "stop"      // SIGSTOP one relay for 3-5 s, then SIGCONT
	faultPartition = "partition" // one partition rejects produce requests for 2-4 s
	faultAmbiguous = "ambiguous" // produce requests written after the client's timeout
	faultLongTx    = "longtx"    // a 5 s transaction on a hot aggregate, relays down at its end
	faultPoison    = "poison"    // an event larger than the broker's message.max.bytes
	faultConsumer  = "consumer"  // SIGKILL the consumer once, restart it 1 s later
)

// allFaults returns the core tier's fault set, in the table's order.
func allFaults() []string {
	return []string{faultKill, faultStop, faultPartition, faultAmbiguous, faultLongTx, faultPoison, faultConsumer}
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
	// Rejected and Delayed are the broker's own counts of produce requests
	// it rejected and wrote late.
	Rejected, Delayed int64
	// Errors are failures of the injection itself.
	Errors []string
}

// total is the number of faults injected, counting each rejected or
// delayed produce request once.
func (f faultCounts) total() int {
	return f.Kills + f.Stops + f.Outages + f.LongTx + f.Poison + f.ConsumerKills + int(f.Rejected) + int(f.Delayed)
}

func (f faultCounts) String() string {
	return fmt.Sprintf("kill×%d stop×%d outage×%d partition-errors×%d (%d requests rejected) ambiguous×%d (%d written late) long-tx×%d poison×%d consumer-kill×%d",
		f.Kills, f.Stops, f.Outages, f.PartitionWindows, f.Rejected, f.AmbiguousArmed, f.Delayed, f.LongTx, f.Poison, f.ConsumerKills)
}

// action is one step of the fault schedule.
type action struct {
	at   time.Duration
	name string
	do   func(ctx context.Context) error
}

// faultEnv is what the schedule acts on.
type faultEnv struct {
	relays     []*proc
	consumer   *proc
	control    string // broker control channel base URL
	workload   *workload
	partitions int
	writeTO    time.Duration
	maxMsg     int

	mu     sync.Mutex
	counts faultCounts
}

// plan derives the fault schedule of a load phase of length d from rng.
// Every fault ends by the time the last action returns.
func (e *faultEnv) plan(rng *rand.Rand, faults map[string]bool, d time.Duration) []action {
	var acts []action
	at := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(d))
	}
	uniform := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	n := len(e.relays)

	// A relay paused with SIGSTOP, and the relays' outage around the end
	// of the long transaction; the kill loop keeps out of both.
	var stopFrom, stopTo time.Duration = -1, -1
	stopped := n - 1
	if faults[faultStop] {
		stopFrom = at(0.15, 0.3)
		stopTo = stopFrom + uniform(3*time.Second, 5*time.Second)
		acts = append(acts,
			action{stopFrom, fmt.Sprintf("SIGSTOP relay-%d", stopped), e.signal(stopped, syscall.SIGSTOP)},
			action{stopTo, fmt.Sprintf("SIGCONT relay-%d", stopped), e.signal(stopped, syscall.SIGCONT)})
	}
	var outFrom, outTo time.Duration = -1, -1
	if faults[faultLongTx] {
		begin := at(0.5, 0.6)
		outFrom = begin + 1500*time.Millisecond
		outTo = begin + longTxHold + 1500*time.Millisecond
		acts = append(acts,
			action{begin, "long transaction on hot-0", e.longTx},
			action{outFrom, "SIGKILL every relay (outage)", e.outage(true)},
			action{outTo, "restart every relay", e.outage(false)})
	}
	if faults[faultKill] {
		for t := 2 * time.Second; ; {
			t += uniform(time.Second, 3*time.Second)
			if t > d-2*time.Second {
				break
			}
			if outFrom >= 0 && t > outFrom-time.Second && t < outTo+500*time.Millisecond {
				continue
			}
			r := rng.IntN(n)
			if r == stopped && stopFrom >= 0 && t > stopFrom-time.Second && t < stopTo+time.Second {
				if n == 1 {
					continue
				}
				r = (r + 1) % n
			}
			acts = append(acts, action{t, fmt.Sprintf("SIGKILL relay-%d", r), e.kill(r, uniform(100*time.Millisecond, 500*time.Millisecond))})
		}
	}
	if faults[faultPartition] {
		p := rng.IntN(e.partitions)
		hold := uniform(2*time.Second, 4*time.Second)
		acts = append(acts, action{at(0.3, 0.5), fmt.Sprintf("partition %d rejects produce for %v", p, hold), e.reject(p, hold)})
	}
	if faults[faultAmbiguous] {
		for range 3 {
			acts = append(acts, action{at(0.1, 0.9), "next produce request written late", e.delay()})
		}
	}
	if faults[faultPoison] {
		acts = append(acts, action{at(0.1, 0.5), "poison message on poison-0", e.poison})
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

func (e *faultEnv) signal(r int, sig syscall.Signal) func(context.Context) error {
	return func(context.Context) error {
		if sig == syscall.SIGSTOP {
			e.add(func(c *faultCounts) { c.Stops++ })
		}
		return e.relays[r].signal(sig)
	}
}

func (e *faultEnv) kill(r int, down time.Duration) func(context.Context) error {
	return func(context.Context) error {
		e.add(func(c *faultCounts) { c.Kills++ })
		if err := e.relays[r].kill(); err != nil {
			return err
		}
		time.Sleep(down) // the fault: the relay stays down this long
		return e.relays[r].restart()
	}
}

func (e *faultEnv) outage(down bool) func(context.Context) error {
	return func(context.Context) error {
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
}

func (e *faultEnv) longTx(ctx context.Context) error {
	e.add(func(c *faultCounts) { c.LongTx++ })
	return e.workload.longTx(ctx, e.workload.hot[0], longTxHold)
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

func (e *faultEnv) reject(p int, hold time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		e.add(func(c *faultCounts) { c.PartitionWindows++ })
		return e.post(ctx, "/reject", url.Values{"partition": {fmt.Sprint(p)}, "for": {hold.String()}})
	}
}

func (e *faultEnv) delay() func(context.Context) error {
	return func(ctx context.Context) error {
		e.add(func(c *faultCounts) { c.AmbiguousArmed++ })
		sleep := e.writeTO + e.writeTO/2
		return e.post(ctx, "/delay", url.Values{"n": {"1"}, "sleep": {sleep.String()}})
	}
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
