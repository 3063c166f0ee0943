package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// stageClock records, by event id, when the claim that returned an event
// started and ended and when the mark that recorded it as published
// returned: with the writer's commit and the broker's ack (ackRecorder),
// the stages of the latency section's "where the time goes" table.
type stageClock struct {
	mu                           sync.Mutex
	claimStart, claimEnd, marked map[string]time.Time
}

func newStageClock() *stageClock {
	return &stageClock{claimStart: map[string]time.Time{}, claimEnd: map[string]time.Time{}, marked: map[string]time.Time{}}
}

// reset forgets every time recorded.
func (c *stageClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.claimStart)
	clear(c.claimEnd)
	clear(c.marked)
}

// stagedStore is the store with its Claim and Mark timed. It embeds
// *sqlstore.Store, so the relay finds every optional interface it looks
// for (claim-ahead, leases, wake-ups) as on the store itself.
type stagedStore struct {
	*sqlstore.Store
	clock *stageClock
}

// Claim times the store's Claim.
func (s stagedStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	start := time.Now()
	b, err := s.Store.Claim(ctx, req)
	end := time.Now()
	if len(b.Messages) > 0 {
		s.clock.mu.Lock()
		for _, m := range b.Messages {
			id := m.EventID.String()
			if _, ok := s.clock.claimStart[id]; !ok {
				s.clock.claimStart[id], s.clock.claimEnd[id] = start, end
			}
		}
		s.clock.mu.Unlock()
	}
	return b, err
}

// Mark times the store's Mark.
func (s stagedStore) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	err := s.Store.Mark(ctx, b, o)
	end := time.Now()
	s.clock.mu.Lock()
	for _, m := range b.Messages {
		id := m.EventID.String()
		if _, ok := s.clock.marked[id]; !ok {
			s.clock.marked[id] = end
		}
	}
	s.clock.mu.Unlock()
	return err
}

// stageNames are the stages, in order.
var stageNames = []string{
	"commit → claim starts (the wait: a wake-up or the poll, or the round before still running)",
	"claim (the statement)",
	"claim returns → broker ack (publish)",
	"broker ack → mark returns (not in the commit → ack latency)",
}

// stages returns, for every event of ids (committed at commits) that went
// through every stage, each stage's duration.
func (c *stageClock) stages(ids []string, commits []time.Time, acks map[string]time.Time) [][]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]time.Duration, len(stageNames))
	for i, id := range ids {
		cs, ok1 := c.claimStart[id]
		ce, ok2 := c.claimEnd[id]
		ack, ok3 := acks[id]
		mk, ok4 := c.marked[id]
		if !ok1 || !ok2 || !ok3 || !ok4 {
			continue
		}
		for s, d := range []time.Duration{cs.Sub(commits[i]), ce.Sub(cs), ack.Sub(ce), mk.Sub(ack)} {
			out[s] = append(out[s], max(0, d))
		}
	}
	for _, d := range out {
		slices.Sort(d)
	}
	return out
}

// stageTable accumulates the stages of every run of one path.
type stageTable struct {
	p50, p99 [][]float64 // by stage, one value per run
}

func (t *stageTable) add(stages [][]time.Duration) {
	if t.p50 == nil {
		t.p50, t.p99 = make([][]float64, len(stageNames)), make([][]float64, len(stageNames))
	}
	for s, d := range stages {
		if len(d) == 0 {
			continue
		}
		t.p50[s] = append(t.p50[s], ms(d[len(d)/2]))
		t.p99[s] = append(t.p99[s], ms(d[len(d)*99/100]))
	}
}

func (t *stageTable) print(w io.Writer, label string) {
	if t.p50 == nil {
		return
	}
	fmt.Fprintf(w, "Where the time goes (%s; each stage's own percentiles, so they do not add up to the total's):\n\n", label)
	fmt.Fprintf(w, "| stage | p50 ms | p99 ms |\n|---|---:|---:|\n")
	for s, name := range stageNames {
		if len(t.p50[s]) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", name, msCell(t.p50[s]), msCell(t.p99[s]))
	}
	fmt.Fprintln(w)
}
