package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// pausedAfter is how late a batch's publish may end after its lease's end
// before the relay takes it for paused (see round.leaseLost): a timer
// fires that late on a busy machine only when the process did not run.
const pausedAfter = 500 * time.Millisecond

// late returns how long ago t was: [Relay.Run]'s clock, which tests
// replace.
func (r *Relay) late(t time.Time) time.Duration {
	if r.since != nil {
		return r.since(t)
	}
	return time.Since(t)
}

// aheadBatch is a batch claimed ahead, while the batch before it was
// published and marked (see [InFlightExcluder]).
type aheadBatch struct {
	b   Batch
	err error
	// failed are the aggregates of which a message failed in the batch
	// before: their messages in b must wait for the failed one.
	failed map[aggregateKey]bool
	// claimed is when the claim was made.
	claimed time.Time
}

// take returns the prefetched batch less the messages of failed aggregates,
// or false when there is nothing to take, or when the batch has spent more
// than half of its time to [Batch.Deadline] waiting for the batch before it
// (a slow publish): the deadline is the store's lease as it stood at the
// claim, and a claim made now gets the lease as renewed since.
func (c *aheadBatch) take(now time.Time) (Batch, bool) {
	if c == nil || c.err != nil || len(c.b.Messages) == 0 {
		return Batch{}, false
	}
	if d := c.b.Deadline; !d.IsZero() && d.Sub(now) < d.Sub(c.claimed)/2 {
		return Batch{}, false
	}
	if len(c.failed) > 0 {
		kept := c.b.Messages[:0:0]
		for _, m := range c.b.Messages {
			if !c.failed[aggregateKey{m.AggregateType, m.AggregateID}] {
				kept = append(kept, m)
			}
		}
		c.b.Messages = kept
	}
	return c.b, len(c.b.Messages) > 0
}

// batch publishes one batch, pre (claimed while the last batch was
// published) or else one it claims, and marks it. After a full batch, when
// the store is an [InFlightExcluder], it claims the next batch once the
// mark of the batch before (prev) has ended, while it publishes this one,
// and returns it; after a batch that did not fill, it claims the next one
// once this one is published (see [Relay.claimsAfterPublish]). When it
// claimed the next batch and that found messages, it marks this batch in
// the background, while the next one is published: the round after waits
// for that mark before it marks its own batch, and leaves its batch
// unmarked when that mark failed, so that both batches are published
// again, in order. It reports
// what happened, and the rest of the round in rd; a batch marked in the
// background is reported to OnBatch by the round after, once its mark has
// ended.
func (r *Relay) batch(ctx context.Context, owner string, pre *aheadBatch, prev *pendingMark, handOverAt, lastClaim time.Time) (res BatchResult, rd round) {
	batchCtx, done := r.batchContext(ctx)
	defer done()
	start := time.Now()
	reported := false // OnBatch was or will be called for this round
	defer func() {
		res.Duration = time.Since(start)
		rd.timedOut = res.Err != nil && errors.Is(context.Cause(batchCtx), errShutdownTimeout)
		if !reported && r.cfg.OnBatch != nil && (res.Claimed > 0 || res.Err != nil) {
			r.cfg.OnBatch(res)
		}
	}()

	b, ok := pre.take(start)
	if ok {
		rd.claimedAt = pre.claimed
	} else {
		// A claim afresh must not find the rows of a mark still on its way.
		if err := r.settle(prev); err != nil {
			// Reported to OnBatch with its batch; Run backs off.
			res.Err, reported = err, true
			return res, rd
		}
		rd.settled = prev != nil
		prev = nil
		claimCtx, cancel := context.WithTimeout(batchCtx, r.cfg.StoreTimeout)
		var err error
		rd.claimedAt = time.Now()
		b, err = r.store.Claim(claimCtx, ClaimRequest{Owner: owner, Limit: r.cfg.BatchSize, MaxBytes: r.cfg.MaxBatchBytes})
		cancel()
		if err != nil {
			res.Err = fmt.Errorf("relay: claim: %w", err)
			return res, rd
		}
	}
	res.Claimed = len(b.Messages)
	res.Full = r.full(b.Messages)
	if len(b.Messages) == 0 {
		rd.again = b.ClaimAgainIn
		return res, rd
	}

	// Claim the next batch while this one is published, once the batch
	// before is marked. The claim runs in the database while the publish
	// runs here and in the broker, so the two use different processors;
	// claimed during a mark instead, it read the very rows the mark was
	// updating, and on a two-core machine slowed both.
	var ahead chan *aheadBatch
	if _, ok := r.store.(InFlightExcluder); ok && res.Full && ctx.Err() == nil {
		ahead = make(chan *aheadBatch, 1)
		go func() {
			if err := prev.wait(); err != nil {
				ahead <- &aheadBatch{err: err}
				return
			}
			ahead <- r.claimAhead(batchCtx, owner, b.Messages)
		}()
	}

	deadline, cause := time.Now().Add(r.cfg.PublishTimeout), errPublishDeadline
	if !b.Deadline.IsZero() && b.Deadline.Before(deadline) {
		// The messages' context carries the lease's end to the publisher,
		// whose writes must not reach the broker after it (the adapters
		// fence them: see adapters/kafka's Publisher).
		deadline, cause = b.Deadline, errLeaseEnded
	}
	if !handOverAt.IsZero() && handOverAt.Before(deadline) {
		// Publishing has failed since the streak began: a publish that
		// hangs (a connection cut off) must not put the hand-over off.
		deadline, cause = handOverAt, errPublishDeadline
	}
	pubCtx, cancel := context.WithDeadlineCause(batchCtx, deadline, cause)
	pubCtx, stopLost := untilLost(pubCtx, b.Lost)
	pubStart := time.Now()
	out := r.publish(pubCtx, b.Messages)
	res.PublishedAt = time.Now()
	// A lease that ended long before the publish did means the process
	// was paused (its timers fire late): it lost its shards, which is no
	// failure of the broker's; so is a lease the store reports lost (its
	// database session ended). One that ended on time means the broker
	// was too slow for it, as when it is cut off: that counts.
	switch cause := context.Cause(pubCtx); {
	case errors.Is(cause, errLeaseLost):
		rd.leaseLost = "the store reported the batch lost (Batch.Lost: its lease ended early, or its lock could not be checked)"
	case errors.Is(cause, errLeaseEnded) && r.late(deadline) > pausedAfter:
		rd.leaseLost = "the relay was paused past the lease's end"
	}
	stopLost()
	cancel()
	if rd.leaseLost != "" {
		// What the loss cut short failed through no fault of its own nor
		// the broker's: the store releases it as it was, with no delay and
		// no attempt counted, for whichever relay holds its shards now.
		for i, f := range out.Failed {
			if !f.Permanent {
				out.Failed[i].Lost, out.Failed[i].Transient = true, true
			}
		}
	}
	res.Messages, res.PublishDuration = b.Messages, res.PublishedAt.Sub(pubStart)
	res.Published, res.Failed, res.Failures = len(out.Published), len(out.Failed), out.Failed

	if err := r.settle(prev); err != nil {
		// The batch before was published but not marked, and will be
		// published again: this one, published after it, must be too, so
		// it is not marked either.
		res.Err = fmt.Errorf("%w; this batch is not marked, and is published again after it", err)
		if ahead != nil {
			<-ahead
		}
		return res, rd
	}
	rd.settled = rd.settled || prev != nil
	switch {
	case ahead != nil:
		rd.next = <-ahead
	case r.claimsAfterPublish(ctx, res, rd, lastClaim):
		// A batch of a slow stream, which did not fill: what committed
		// while it was published is claimed now, before the batch is
		// marked, and the mark runs while that is published instead of
		// holding up the claim. A claim that finds nothing leaves the
		// mark in line, and the round after claims afresh.
		rd.next = r.claimAhead(batchCtx, owner, b.Messages)
	}
	if rd.next != nil {
		if rd.leaseLost != "" {
			// Claimed under the lease that was lost: claim afresh.
			rd.next = &aheadBatch{}
		}
		rd.next.holdBack(b.Messages, out.Failed)
		if rd.next.err != nil && ctx.Err() == nil {
			// The next round claims afresh, and reports its own error.
			r.log.Debug("relay: claim ahead failed", errAttr(rd.next.err))
		}
		// Once ctx has ended no round follows: mark in line, within this
		// batch's ShutdownTimeout (a context made for a background mark
		// now would start its own).
		if rd.next.err == nil && len(rd.next.b.Messages) > 0 && ctx.Err() == nil {
			rd.marking = r.markInBackground(ctx, b, out, res, start)
			reported = true
			return res, rd
		}
	}

	if err := r.mark(batchCtx, b, out); err != nil {
		// The batch's published messages are published again: none of
		// their aggregates' later messages may go out before them.
		res.Err = err
		rd.next = nil
	}
	return res, rd
}

// mark has the store mark b with out, within StoreTimeout.
func (r *Relay) mark(ctx context.Context, b Batch, out Outcome) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	defer cancel()
	if err := r.store.Mark(ctx, b, out); err != nil {
		return fmt.Errorf("relay: mark: %w", err)
	}
	return nil
}

// pendingMark is a batch's mark running in the background.
type pendingMark struct {
	done chan struct{}
	// res, with the mark's error in res.Err, is set before done is closed.
	res BatchResult
	// reported is set when res went to OnBatch; only the goroutine
	// running Run reads or writes it.
	reported bool
}

// wait waits for the mark to end and returns its error; a nil mark has
// none.
func (m *pendingMark) wait() error {
	if m == nil {
		return nil
	}
	<-m.done
	return m.res.Err
}

// settle waits for m, reports its batch to OnBatch (once), records the
// batch's progress when its mark succeeded, and returns the mark's error.
// Only the goroutine running Run calls it, so that OnBatch is called from
// there, in batch order.
func (r *Relay) settle(m *pendingMark) error {
	err := m.wait()
	if m != nil && !m.reported {
		m.reported = true
		if err == nil && !failedWhole(m.res) {
			// As Run counts a batch marked in line: not one of which
			// nothing was published for an outage.
			r.progress.Store(time.Now().UnixNano())
		}
		if r.cfg.OnBatch != nil {
			r.cfg.OnBatch(m.res)
		}
	}
	return err
}

// markInBackground marks b with out, on a context of its own that, as a
// batch's, outlives ctx by [Config.ShutdownTimeout]; res, completed with
// the mark's outcome, is reported by [Relay.settle].
func (r *Relay) markInBackground(ctx context.Context, b Batch, out Outcome, res BatchResult, start time.Time) *pendingMark {
	m := &pendingMark{done: make(chan struct{})}
	mctx, release := r.batchContext(ctx)
	go func() {
		defer close(m.done)
		defer release()
		res.Err = r.mark(mctx, b, out)
		res.Duration = time.Since(start)
		m.res = res
	}()
	return m
}

// round is what one batch left for the next: whether
// [Config.ShutdownTimeout] cut it short, the batch claimed ahead, the
// batch's mark when it runs in the background, and the store's hint of
// when to claim again.
type round struct {
	timedOut bool
	// leaseLost says why, when the batch's lease ended during its
	// publish while the relay was paused, or the store reported it lost:
	// what was not published is not the broker's failure, and the next
	// claim finds the shards gone (or renews the lease, when no other
	// relay took them).
	leaseLost string
	next      *aheadBatch
	marking   *pendingMark // the batch's mark, running in the background
	settled   bool         // the mark of the batch before, in the background, succeeded
	again     time.Duration
	// claimedAt is when the round's batch was claimed (ahead, by the
	// round before, or afresh); zero when the round made no claim (the
	// mark of the batch before failed first).
	claimedAt time.Time
}

// claimsAfterPublish reports whether the relay claims the next batch as
// soon as res's batch is published, before marking it, and marks it while
// that batch is published (see [Relay.batch]): when the store leaves the
// batch's messages out of the claim ([InFlightExcluder]), the batch did
// not fill (a full one has its next batch claimed during its publish),
// some of it was published, its lease held, and the stream is slower than
// one the relay lets gather ([Config.CoalesceRows]): the batch is smaller
// than CoalesceRows, and its messages came at less than CoalesceRows per
// two ActivePollIntervals since the claim before (lastClaim; 2,000 a
// second by default). A steady stream's round is then a claim and a
// publish, not a claim, a publish and a mark: every message waits for one
// mark less. A faster stream keeps its rounds with the mark in line: their
// batches reach CoalesceRows and are gathered, where rounds cut short by
// the claims after publishes would stay below it, and claim a few
// messages at a time on the writers' cores.
func (r *Relay) claimsAfterPublish(ctx context.Context, res BatchResult, rd round, lastClaim time.Time) bool {
	if _, ok := r.store.(InFlightExcluder); !ok || res.Full || res.Published == 0 || rd.leaseLost != "" || ctx.Err() != nil {
		return false
	}
	rows := r.cfg.CoalesceRows
	if rows <= 0 {
		return true
	}
	if res.Claimed >= rows {
		return false
	}
	// rd.claimedAt is set: the batch was claimed and published.
	gap := rd.claimedAt.Sub(lastClaim)
	return lastClaim.IsZero() || gap <= 0 ||
		time.Duration(res.Claimed)*2*r.cfg.ActivePollInterval < time.Duration(rows)*gap
}

// full reports whether a claim of msgs may have left messages behind: it
// reached BatchSize, or (a store stops short of MaxBatchBytes when the next
// message would overshoot it) passed half the byte cap.
func (r *Relay) full(msgs []runtime.OutboxMessage) bool {
	return len(msgs) >= r.cfg.BatchSize || r.cfg.MaxBatchBytes > 0 && 2*payloadBytes(msgs) >= r.cfg.MaxBatchBytes
}

// claimAhead claims the batch after msgs, leaving msgs out.
func (r *Relay) claimAhead(ctx context.Context, owner string, msgs []runtime.OutboxMessage) *aheadBatch {
	inFlight := make([]int64, len(msgs))
	for i, m := range msgs {
		inFlight[i] = m.ID
	}
	c := &aheadBatch{claimed: time.Now()}
	claimCtx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	defer cancel()
	c.b, c.err = r.store.Claim(claimCtx, ClaimRequest{Owner: owner, Limit: r.cfg.BatchSize, MaxBytes: r.cfg.MaxBatchBytes, InFlight: inFlight})
	return c
}

// holdBack notes the aggregates of the failed messages of msgs (the batch
// before c): take leaves their messages out.
func (c *aheadBatch) holdBack(msgs []runtime.OutboxMessage, failed []Failure) {
	if len(failed) == 0 {
		return
	}
	aggOf := make(map[int64]aggregateKey, len(msgs))
	for _, m := range msgs {
		aggOf[m.ID] = aggregateKey{m.AggregateType, m.AggregateID}
	}
	c.failed = make(map[aggregateKey]bool, len(failed))
	for _, f := range failed {
		c.failed[aggOf[f.ID]] = true
	}
}

// payloadBytes sums the payload sizes of msgs.
func payloadBytes(msgs []runtime.OutboxMessage) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Payload))
	}
	return n
}

// batchContext returns the context a batch runs with: ctx's values without its
// cancellation, cancelled [Config.ShutdownTimeout] after ctx is done. The
// returned function releases it.
func (r *Relay) batchContext(ctx context.Context) (context.Context, func()) {
	batchCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		// Cancelling after done has run is harmless, so the timer
		// needs no stopping.
		time.AfterFunc(r.cfg.ShutdownTimeout, func() { cancel(errShutdownTimeout) })
	})
	return batchCtx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// failedWhole reports whether nothing of res was published, and not only
// because its messages were rejected for good: the broker is down.
func failedWhole(res BatchResult) bool {
	return res.Published == 0 && outage(res.Failures)
}

// outage reports whether failures include one that is not a message's own
// fault: neither permanent nor a message held back behind an earlier
// failure of its aggregate. A batch in which nothing was published for such
// a reason means the broker is down; one whose messages were all rejected
// for good does not.
func outage(failures []Failure) bool {
	for _, f := range failures {
		if !f.Permanent && !errors.Is(f.Err, errEarlierFailed) {
			return true
		}
	}
	return false
}
