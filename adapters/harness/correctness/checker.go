package main

import (
	"fmt"
	"sort"
	"strings"
)

// ledgerEvent is one committed event as the ledger knows it.
type ledgerEvent struct {
	ID          string
	AggregateID string
	Tx          int64
	Seq         int // position among the ledger rows of its transaction
}

// commitWindow brackets one transaction's commit on the writer's monotonic
// clock: Before is read right before Commit is called, After right after it
// returned. The commit happened somewhere in between.
type commitWindow struct {
	Before, After int64
}

// delivery is one record of the broker's log, or one row of the apply log.
type delivery struct {
	EventID     string
	AggregateID string
	Partition   int32 // -1 for the apply log
	Offset      int64 // the log offset, or the apply log's row id
}

// checkInput is everything the checker compares.
type checkInput struct {
	Ledger  map[string]ledgerEvent
	Commits map[int64]commitWindow
	// Poison are the ids of events the broker can never take: committed,
	// expected to be parked, and excluded from "lost".
	Poison map[string]bool
	// Log is the broker's raw log, every partition read from offset 0, in
	// offset order per partition.
	Log []delivery
	// Applied is the consumer's apply log in the order it was written.
	Applied []delivery
}

// violation is one pair of events of one aggregate delivered against their
// known commit order: Early committed first but was delivered second.
type violation struct {
	AggregateID  string
	Early, Late  string // event ids: Early committed before Late
	EarlyPos     int64  // first delivery positions (offset or apply log id)
	LatePos      int64
	Partition    int32
	EarlyTx      int64
	LateTx       int64
	SameTx       bool
	CommitWindow [2]commitWindow
}

func (v violation) String() string {
	ms := func(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
	how := fmt.Sprintf("tx %d committed in [%s, %s], before tx %d began committing at %s",
		v.EarlyTx, ms(v.CommitWindow[0].Before), ms(v.CommitWindow[0].After), v.LateTx, ms(v.CommitWindow[1].Before))
	if v.SameTx {
		how = fmt.Sprintf("recorded earlier in tx %d", v.EarlyTx)
	}
	return fmt.Sprintf("aggregate %s: %s (%s) delivered at %d:%d after %s at %d:%d",
		v.AggregateID, v.Early, how, v.Partition, v.EarlyPos, v.Late, v.Partition, v.LatePos)
}

// checkReport is the checker's verdict.
type checkReport struct {
	Committed      int
	PoisonInLog    int
	Lost           []string // committed, not poison, never in the log
	Ghosts         []string // in the log but never committed
	LogRecords     int
	LogDuplicates  int // records minus distinct ids
	Order          orderReport
	SplitAggs      []string // aggregates found in more than one partition
	Applied        int      // apply log rows
	DupEffects     int      // apply log rows minus distinct ids
	ApplyGhosts    []string // applied but never committed
	NotApplied     []string // in the log, not applied
	ConsumerOrder  orderReport
	UnknownCommits int // ledger transactions with no commit window (a suite bug)
}

// orderReport counts order violations: pairs of events of one aggregate
// whose commit order is known and whose first deliveries are the other way
// round.
type orderReport struct {
	Pairs       int
	Aggregates  int
	ByAggregate map[string]int // violating pairs per aggregate
	Examples    []violation
}

// maxExamples bounds the violations kept for printing.
const maxExamples = 1000

// check compares the ledger with the broker's log and the apply log.
func check(in checkInput) checkReport {
	var r checkReport
	r.Committed = len(in.Ledger)
	for _, e := range in.Ledger {
		if _, ok := in.Commits[e.Tx]; !ok {
			r.UnknownCommits++
		}
	}

	seen := map[string]bool{}
	for _, d := range in.Log {
		r.LogRecords++
		if seen[d.EventID] {
			r.LogDuplicates++
			continue
		}
		seen[d.EventID] = true
		if _, ok := in.Ledger[d.EventID]; !ok {
			r.Ghosts = append(r.Ghosts, d.EventID)
		}
	}
	for id := range in.Ledger {
		switch {
		case in.Poison[id] && seen[id]:
			r.PoisonInLog++
		case in.Poison[id]:
		case !seen[id]:
			r.Lost = append(r.Lost, id)
		}
	}
	r.Order, r.SplitAggs = checkOrder(in, in.Log)

	applied := map[string]bool{}
	for _, d := range in.Applied {
		r.Applied++
		if applied[d.EventID] {
			r.DupEffects++
			continue
		}
		applied[d.EventID] = true
		if _, ok := in.Ledger[d.EventID]; !ok {
			r.ApplyGhosts = append(r.ApplyGhosts, d.EventID)
		}
	}
	for id := range seen {
		if !applied[id] {
			r.NotApplied = append(r.NotApplied, id)
		}
	}
	r.ConsumerOrder, _ = checkOrder(in, in.Applied)
	sort.Strings(r.Lost)
	sort.Strings(r.Ghosts)
	sort.Strings(r.ApplyGhosts)
	sort.Strings(r.NotApplied)
	return r
}

// mustPrecede reports whether a is known to have committed before b: a
// earlier in the same transaction, or a's transaction's commit returned
// before b's was called.
func mustPrecede(in checkInput, a, b ledgerEvent) bool {
	if a.Tx == b.Tx {
		return a.Seq < b.Seq
	}
	ca, ok1 := in.Commits[a.Tx]
	cb, ok2 := in.Commits[b.Tx]
	return ok1 && ok2 && ca.After < cb.Before
}

// checkOrder takes the first delivery of each committed event, groups them
// by aggregate (and partition) in delivery order, and counts every pair
// delivered against its known commit order. Later deliveries of an id (a
// redelivered tail) are ignored; poison and uncommitted ids are skipped.
func checkOrder(in checkInput, ds []delivery) (orderReport, []string) {
	type key struct {
		agg  string
		part int32
	}
	seen := map[string]bool{}
	seqs := map[key][]delivery{}
	parts := map[string]map[int32]bool{}
	for _, d := range ds {
		if seen[d.EventID] || in.Poison[d.EventID] {
			continue
		}
		seen[d.EventID] = true
		e, ok := in.Ledger[d.EventID]
		if !ok {
			continue
		}
		k := key{e.AggregateID, d.Partition}
		seqs[k] = append(seqs[k], d)
		if parts[e.AggregateID] == nil {
			parts[e.AggregateID] = map[int32]bool{}
		}
		parts[e.AggregateID][d.Partition] = true
	}
	var split []string
	for agg, ps := range parts {
		if len(ps) > 1 {
			split = append(split, agg)
		}
	}
	sort.Strings(split)

	keys := make([]key, 0, len(seqs))
	for k := range seqs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].agg != keys[j].agg {
			return keys[i].agg < keys[j].agg
		}
		return keys[i].part < keys[j].part
	})
	r := orderReport{ByAggregate: map[string]int{}}
	for _, k := range keys {
		s := seqs[k]
		bad := false
		for i := range s {
			ei := in.Ledger[s[i].EventID]
			for j := i + 1; j < len(s); j++ {
				ej := in.Ledger[s[j].EventID]
				if !mustPrecede(in, ej, ei) {
					continue
				}
				r.Pairs++
				r.ByAggregate[k.agg]++
				bad = true
				if len(r.Examples) < maxExamples {
					r.Examples = append(r.Examples, violation{
						AggregateID: k.agg, Partition: k.part,
						Early: ej.ID, Late: ei.ID, EarlyPos: s[j].Offset, LatePos: s[i].Offset,
						EarlyTx: ej.Tx, LateTx: ei.Tx, SameTx: ej.Tx == ei.Tx,
						CommitWindow: [2]commitWindow{in.Commits[ej.Tx], in.Commits[ei.Tx]},
					})
				}
			}
		}
		if bad {
			r.Aggregates++
		}
	}
	return r, split
}

// failures lists what makes the report a failure, given the bound on log
// duplicates; empty means the run passed.
func (r checkReport) failures(dupBound int) []string {
	var f []string
	add := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }
	if len(r.Lost) > 0 {
		add("%d committed events lost (never on the broker), e.g. %s", len(r.Lost), head(r.Lost))
	}
	if len(r.Ghosts) > 0 {
		add("%d ghost events on the broker (never committed), e.g. %s", len(r.Ghosts), head(r.Ghosts))
	}
	if r.Order.Pairs > 0 {
		add("%d order violations on the broker (pairs, %d aggregates)", r.Order.Pairs, r.Order.Aggregates)
	}
	if len(r.SplitAggs) > 0 {
		add("%d aggregates on more than one partition, e.g. %s", len(r.SplitAggs), head(r.SplitAggs))
	}
	if r.DupEffects > 0 {
		add("%d duplicate effects at the consumer", r.DupEffects)
	}
	if len(r.ApplyGhosts) > 0 {
		add("%d ghost events applied by the consumer, e.g. %s", len(r.ApplyGhosts), head(r.ApplyGhosts))
	}
	if len(r.NotApplied) > 0 {
		add("%d events on the broker never applied by the consumer, e.g. %s", len(r.NotApplied), head(r.NotApplied))
	}
	if r.ConsumerOrder.Pairs > 0 {
		add("%d order violations at the consumer (pairs, %d aggregates)", r.ConsumerOrder.Pairs, r.ConsumerOrder.Aggregates)
	}
	if r.LogDuplicates > dupBound {
		add("%d log duplicates, above the bound %d", r.LogDuplicates, dupBound)
	}
	if r.PoisonInLog > 0 {
		add("%d poison events reached the broker", r.PoisonInLog)
	}
	if r.UnknownCommits > 0 {
		add("%d ledger rows without a commit window (suite bug)", r.UnknownCommits)
	}
	return f
}

func head(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + ", ..."
	}
	return strings.Join(ids, ", ")
}
