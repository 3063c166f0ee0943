package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// printTable prints the runs' results, one row each.
func printTable(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tseed\tscenario\tpaths\trelays\tevents\tfaults injected\tlost\tghosts\torder violations\tduplicate effects\tlog duplicates (bound)\tconsumer order violations\tstale records\tpoison (parked)\twall time\tresult\t")
	for _, r := range results {
		verdict := "PASS"
		if !r.passed() {
			verdict = "FAIL"
		}
		rep := r.Report
		stale := "-"
		if len(r.Fences) > 0 {
			n := 0
			for _, f := range r.Fences {
				n += f.Stale
			}
			stale = fmt.Sprint(n)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%s\t%d (%d)\t%s\t%s\t\n",
			r.Opts.Name, r.Seed, scenarioName(r.Opts.Faults), pathsName(r.Opts.Paths), r.Opts.Relays, rep.Committed, r.Faults.total(),
			len(rep.Lost), len(rep.Ghosts), rep.Order.Pairs, rep.DupEffects,
			rep.LogDuplicates, r.DupBound, rep.ConsumerOrder.Pairs, stale, r.Poison, r.Parked+r.Discarded,
			r.Wall.Round(100*time.Millisecond), verdict)
	}
	tw.Flush()
}

// printSummary prints what the table's numbers are made of.
func printSummary(w io.Writer, r *result) {
	ws := r.Workload
	rolled := ws.RolledBack + ws.Savepoints
	pct := 0.0
	if ws.Attempts > 0 {
		pct = 100 * float64(rolled) / float64(ws.Attempts)
	}
	fmt.Fprintf(w, "%s on %s, seed %d: %d transactions, %d committed, %d rolled back (%d of them by deadlock detection) + %d savepoints rolled back (%.1f%%), %d aggregates retried, %d abandoned\n",
		r.Opts.Name, dbName(r.Opts.DB), r.Seed, ws.Attempts, ws.Committed, ws.RolledBack, ws.Deadlocks, ws.Savepoints, pct, ws.Retried, ws.Abandoned)
	paths := make([]string, 0, len(ws.ByPath))
	for p, n := range ws.ByPath {
		paths = append(paths, fmt.Sprintf("%s=%d", p, n))
	}
	sort.Strings(paths)
	fmt.Fprintf(w, "  write paths: %s; writers waited %v in all for the backlog to fall to %d\n",
		strings.Join(paths, " "), ws.Throttled.Round(time.Millisecond), r.Opts.maxBacklog())
	fmt.Fprintf(w, "  faults: %s\n", r.Faults)
	rep := r.Report
	fmt.Fprintf(w, "  broker log: %d records, %d distinct events; %d order violations in %d aggregates; consumer: %d applies, %d order violations in %d aggregates\n",
		rep.LogRecords, rep.LogRecords-rep.LogDuplicates, rep.Order.Pairs, rep.Order.Aggregates,
		rep.Applied, rep.ConsumerOrder.Pairs, rep.ConsumerOrder.Aggregates)
	fmt.Fprintf(w, "  poison: %d committed, %d on the broker, outbox parked %d, then discarded %d as an operator would, releasing its aggregate's later events (poison events are excluded from lost); %d healthy parked messages unparked\n",
		r.Poison, rep.PoisonInLog, r.Parked+r.Discarded, r.Discarded, r.Unparked)
	for _, l := range r.Liveness {
		verdict := "ok"
		if l.failure() != "" {
			verdict = "FAIL"
		}
		recovered := l.Recovered.Round(time.Millisecond).String()
		if !l.Published {
			recovered = "not recovered in " + recovered
		}
		total := l.Recovered
		if l.From == "heal" {
			total += l.Held
		}
		fmt.Fprintf(w, "  liveness: %-10s at %5.1fs, held %-6v recovered %-8s after the %-5s (bound %v = %v + control probe %v; %v after the fault began) %s %s\n",
			l.Fault, l.At.Seconds(), l.Held.Round(time.Millisecond), recovered, l.From, l.Bound.Round(time.Millisecond),
			l.Bound-l.Healthy, l.Healthy.Round(time.Millisecond), total.Round(time.Millisecond), verdict, l.Note)
	}
	for _, f := range r.Fences {
		verdict := "ok"
		if f.failure() != "" {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "  fencing:  %-10s at %5.1fs, relay-%d: %d stale records, %d records after the successor's first of their aggregate, %d written in all (window %v) %s %s\n",
			f.Fault, f.At.Seconds(), f.Relay, f.Stale, f.Late, f.Wrote, f.To.Sub(f.From).Round(time.Millisecond), verdict, strings.Join(f.Examples, "; "))
	}
	if len(r.Fences) > 0 {
		fmt.Fprintf(w, "  fencing: %d log records not attributed to a relay (no produce response seen by a proxy)\n", r.Unattributed)
	}
}

// scenarioName names a fault set: "all", "none" or the list.
func scenarioName(faults map[string]bool) string {
	var on []string
	for _, f := range allFaults() {
		if faults[f] {
			on = append(on, f)
		}
	}
	switch len(on) {
	case len(allFaults()):
		return "all"
	case 0:
		return "none"
	}
	return strings.Join(on, ",")
}

// pathsName names a write path set: "all", "save" or "enqueue".
func pathsName(paths map[string]bool) string {
	switch {
	case paths[pathSave] && paths[pathEnqueue]:
		return "all"
	case paths[pathSave]:
		return pathSave
	}
	return pathEnqueue
}

// dbName is the outbox's database as the summary names it.
func dbName(db string) string {
	if db == "" {
		return "postgres"
	}
	return db
}
