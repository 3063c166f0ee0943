package consumer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"github.com/gooutbox/outbox/runtime"
)

// errAlone is the outcome of a delivery whose group transaction rolled
// back, or that left its group: it is applied in a transaction of its own.
var errAlone = errors.New("consumer: apply alone")

// grouper holds the deliveries [Consumer.HandlerFunc] gets while
// [Config.MaxTransactions] inbox transactions run (see
// [Consumer.groupAttempt]).
type grouper struct {
	mu      sync.Mutex
	waiting []*member
	running int // transactions running, each led by a delivery
}

// member is a delivery waiting in a grouper.
type member struct {
	b    batched
	done chan memberResult // one value: the group's outcome, or the lead
}

// memberResult is what a delivery learns from its group: that it leads the
// next one, or its outcome (nil: applied; errDuplicate; errAlone; or, in a
// group of one, the attempt's error) and the group's size.
type memberResult struct {
	lead bool
	err  error
	size int
}

// groupAttempt is the first attempt of a delivery from HandlerFunc with
// [Config.MaxTransactions] set: while fewer than MaxTransactions inbox
// transactions run, it leads one, which applies it and the deliveries
// waiting; otherwise it waits, for a transaction that takes it or for its
// turn to lead one. A transaction of one delivery is the attempt
// [Consumer.attempt] makes; one of several applies them as [Consumer.Run]
// applies a batch, and when it rolls back each gets errAlone. It returns
// the size of the group it was applied in, and an error as attempt does
// (or errAlone).
func (c *Consumer) groupAttempt(ctx context.Context, r *route, evt runtime.Event, res *Result) (size int, err error) {
	me := &member{b: batched{route: r, evt: evt, meta: res.Meta, ctx: ctx}, done: make(chan memberResult, 1)}
	g := &c.group
	g.mu.Lock()
	if g.running < c.cfg.MaxTransactions {
		g.running++
		g.mu.Unlock()
		return c.lead(me)
	}
	g.waiting = append(g.waiting, me)
	g.mu.Unlock()
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.Debug("consumer: delivery waits for an inbox transaction", c.attrs(res)...)
	}
	var out memberResult
	select {
	case out = <-me.done:
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.waiting, me); i >= 0 {
			g.waiting = slices.Delete(g.waiting, i, i+1)
			g.mu.Unlock()
			return 1, errAlone
		}
		g.mu.Unlock()
		// Taken by a group, whose transaction ends within TxTimeout, or
		// given the lead.
		out = <-me.done
	}
	if out.lead {
		return c.lead(me)
	}
	return out.size, out.err
}

// lead runs one transaction, of me and the deliveries waiting (up to
// BatchSize), hands the lead to the next delivery waiting (or frees the
// slot), and tells each its outcome; it returns me's.
func (c *Consumer) lead(me *member) (size int, err error) {
	g := &c.group
	g.mu.Lock()
	n := min(len(g.waiting), c.cfg.BatchSize-1)
	run := append([]*member{me}, g.waiting[:n]...)
	g.waiting = slices.Delete(g.waiting, 0, n)
	g.mu.Unlock()

	results := make([]memberResult, len(run))
	for i := range results {
		results[i] = memberResult{err: errAlone, size: 1}
	}
	told := false
	defer func() {
		if !told {
			// A panic below: the others apply alone, and the slot or the
			// lead goes on.
			c.handOver(run, results)
		}
	}()
	var live []int // members whose delivery has not been canceled
	for i, m := range run {
		if m.b.ctx.Err() == nil {
			live = append(live, i)
		}
	}
	switch len(live) {
	case 0:
	case 1:
		m := run[live[0]]
		results[live[0]] = memberResult{err: c.attempt(m.b.ctx, m.b.route, m.b.evt, m.b.meta), size: 1}
	default:
		batch := make([]batched, len(live))
		for j, i := range live {
			batch[j] = run[i].b
		}
		// The transaction is the group's: it does not end with the
		// leader's delivery (each handler gets its own context).
		applied, err := c.batchTx(context.WithoutCancel(me.b.ctx), batch)
		for j, i := range live {
			switch {
			case err != nil:
				results[i] = memberResult{err: errAlone, size: 1}
			case applied[j]:
				results[i] = memberResult{size: len(live)}
			default:
				results[i] = memberResult{err: errDuplicate, size: len(live)}
			}
		}
	}

	told = true
	c.handOver(run, results)
	return results[0].size, results[0].err
}

// handOver ends a transaction of run (its leader first): it gives the lead
// to the first delivery waiting, or frees the slot, and tells the others
// their results.
func (c *Consumer) handOver(run []*member, results []memberResult) {
	g := &c.group
	g.mu.Lock()
	if len(g.waiting) > 0 {
		next := g.waiting[0]
		g.waiting = slices.Delete(g.waiting, 0, 1)
		next.done <- memberResult{lead: true}
	} else {
		g.running--
	}
	g.mu.Unlock()
	for i, m := range run[1:] {
		m.done <- results[i+1]
	}
}
