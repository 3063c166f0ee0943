package relay

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/internal/backoff"
)

// Run relays messages until ctx is cancelled. It blocks.
//
// Each round claims up to [Config.BatchSize] messages with [Store.Claim] and
// publishes them. After a claim that found messages Run claims again at
// once, or, after a partial batch of a fast stream, once a short wait has
// let the next batch gather ([Config.CoalesceRows]). After one that found
// nothing, within [Config.ActivePeriod] of its last claim that found
// messages, it claims again after [Config.ActivePollInterval]; once idle,
// it asks a [WakeRequester] store for a notification, claims once more, and
// then waits for a wake-up: a [Notifier] notification, a [Relay.Notify]
// call, or [Config.PollInterval] elapsing. A wake-up cuts every wait for
// messages short. When a batch fails as a whole (the store
// returned an error, or nothing could be published for a reason other than
// messages rejected for good), Run logs the failure at Warn and backs off
// exponentially between [Config.MinBackoff] and [Config.MaxBackoff] before
// claiming again; a batch of which some messages were published is logged
// but not backed off. Such errors never make Run return: it keeps retrying
// until ctx is cancelled.
//
// If the store implements [Notifier], Run calls [Notifier.Listen] in a
// goroutine and, when Listen fails, logs the error and calls it again after a
// backoff; polling goes on meanwhile. When Listen reports
// errors.ErrUnsupported, Run stops calling it and polls as for a store that
// is not a Notifier (every 100ms unless PollInterval is set).
//
// When ctx is cancelled Run stops claiming, lets the batch in flight finish
// (bounded by [Config.ShutdownTimeout]), stops listening, and returns nil. It
// returns [ErrRunning] at once if another Run on the same relay has not
// returned yet. Run may be called again after it has returned.
func (r *Relay) Run(ctx context.Context) error {
	if !r.active.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.active.Store(false)
	if ctx.Err() != nil {
		return nil
	}
	// The name this Run claims under: the owner of its leases in the
	// store (sqlstore's <table>_leases), logged so that an operator can
	// tell which process holds which shards.
	s := &runState{r: r, owner: uuid.NewString(), listening: r.notifier == nil}
	s.shards, _ = r.store.(ShardHolder)

	// The listener starts at the first claim that does not say the store
	// hands this relay nothing yet (an empty batch with
	// Batch.ClaimAgainIn): a relay that starts as a standby (sqlstore's
	// StoreConfig.MaxActiveRelays) has nothing to be woken for, and holds
	// no connection for it, until it takes shards over. Once started, the
	// listener runs until Run returns.
	var stopListening func()
	s.listenCtx, stopListening = context.WithCancel(ctx)
	defer s.wg.Wait()
	defer stopListening()
	if s.listening {
		r.markRunning()
	}
	r.log.Info("relay: started",
		attrOwner, s.owner,
		attrBatchSize, r.cfg.BatchSize,
		attrPollInterval, r.cfg.PollInterval,
		attrNotifier, r.notifier != nil)
	// The stop is logged last, after the batch in flight was finished and
	// marked (or gave up) and the leases were released, saying which.
	defer s.logStop()
	if rel, ok := r.store.(Releaser); ok {
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StoreTimeout)
			defer cancel()
			if err := rel.Release(rctx, s.owner); err != nil {
				r.log.Warn("relay: release failed", errAttr(err))
			}
		}()
	}
	s.poll = time.NewTimer(time.Duration(r.poll.Load()))
	defer s.poll.Stop()
	defer func() {
		// Run returns once the last batch's mark has ended (within
		// ShutdownTimeout of ctx's end); one that failed leaves its
		// messages to be published again.
		if err := r.settle(s.marking); err != nil {
			s.lastMarked = err
			r.log.Warn("relay: the last batch's mark failed; its messages will be published again", errAttr(err))
		}
	}()
	defer r.held.Store(-1)
	for first := true; ctx.Err() == nil; first = false {
		if !s.round(ctx, first) {
			break
		}
	}
	return nil
}

// runState is what one [Relay.Run] keeps from one round (a claim, its
// publish and mark) to the next.
type runState struct {
	r      *Relay
	owner  string       // the owner of this Run's leases
	shards ShardHolder  // the store, when it tells which shards this Run holds
	held   int          // shards the store said this Run holds, when it tells
	poll   *time.Timer  // the wait between rounds that found nothing
	cut    brokerOutage // the streak of rounds the broker failed, for hand-overs

	// The listener: started at the first round that may be woken.
	listenCtx context.Context
	wg        sync.WaitGroup
	listening bool

	next    *aheadBatch  // a batch claimed while the last one was published
	marking *pendingMark // the last batch's mark, running in the background

	failures   int       // consecutive failed rounds
	lastClaim  time.Time // when the last batch published, or the last claim that found nothing, was claimed
	lastFound  time.Time // the last claim that found messages
	requested  bool      // the store was asked to wake this relay
	wakeFailed bool      // the last wake request failed (warned once)

	last       BatchResult // the last batch's, claimed before or at the stop
	lastMarked error       // its mark's outcome, when the mark ran in the background
}

// logStop logs the end of Run, saying what became of the last batch.
func (s *runState) logStop() {
	attrs := []any{attrOwner, s.owner, attrClaimed, s.last.Claimed, attrPublished, s.last.Published}
	switch {
	case s.last.Claimed == 0:
		s.r.log.Info("relay: stopped; no batch was in flight", attrs...)
	case s.last.Err != nil || s.lastMarked != nil:
		s.r.log.Info("relay: stopped; the last batch was not marked: whoever holds its shards next publishes it again", append(attrs, errAttr(cmp.Or(s.lastMarked, s.last.Err)))...)
	default:
		s.r.log.Info("relay: stopped; the last batch was published and marked", attrs...)
	}
}

// round claims, publishes and marks one batch, then backs off after a
// failure or waits for a wake-up when it found nothing, and reports
// whether Run goes on.
func (s *runState) round(ctx context.Context, first bool) bool {
	r := s.r
	res, rd := r.batch(ctx, s.owner, s.next, s.marking, r.handOverAt(ctx, s.owner, &s.cut, time.Now()), s.lastClaim)
	s.next, s.marking = rd.next, rd.marking
	if !rd.claimedAt.IsZero() {
		s.lastClaim = rd.claimedAt
	}
	if res.Claimed > 0 || ctx.Err() == nil {
		s.last = res
	}
	s.noteShards(res, first)
	if !s.listening {
		if res.Err == nil && res.Claimed == 0 && rd.again > 0 {
			// Nothing to listen for yet: it claims again by then.
			r.markRunning()
		} else {
			s.listening = true
			s.wg.Go(func() { r.listen(s.listenCtx) })
		}
	}
	if rd.timedOut {
		r.log.Warn("relay: shutdown timeout exceeded, batch released",
			attrClaimed, res.Claimed,
			attrShutdownTimeout, r.cfg.ShutdownTimeout,
			errAttr(res.Err))
		return false
	}
	switch {
	case res.Err != nil || failedWhole(res):
		// The store failed, or nothing could be published and not only
		// because messages were rejected for good: the broker or the
		// database is down.
		return s.failed(ctx, res, rd)
	case rd.leaseLost != "":
		// Partial, cut short by the lease's loss: what was published is
		// marked, the rest is published again.
		s.warnLeaseLost(res, rd)
	case res.Failed > 0:
		// Partial: the publisher works; the failed messages wait in the
		// store for their retry, and the relay goes on.
		r.logFailure(res, 1, 0)
	}
	// A batch marked in the background has not ended yet: it counts
	// once its mark has succeeded (see settle), as does the streak of
	// failures it would end.
	if rd.marking == nil || rd.settled {
		s.failures = 0
	}
	if rd.marking == nil {
		r.progress.Store(time.Now().UnixNano())
	}
	if res.Published > 0 {
		s.cut = brokerOutage{} // the broker takes this relay's messages
	}
	if res.Claimed > 0 {
		r.log.Debug("relay: batch published",
			attrClaimed, res.Claimed,
			attrPublished, res.Published,
			attrDuration, res.Duration)
		s.lastFound = time.Now()
		s.requested = false // the claim ended the store's wake request
		// More may be pending, or on its way: a claim that finds
		// nothing ends the streak.
		if d := r.coalesce(res, rd); d > 0 {
			// A fast stream: let it gather (see Config.CoalesceRows).
			// A wake-up does not cut this short: the relay knows
			// messages are coming.
			s.poll.Reset(d)
			select {
			case <-ctx.Done():
			case <-s.poll.C:
			}
		}
		return true
	}
	s.wait(ctx, rd)
	return true
}

// noteShards records, and logs when it changed, how many shards the store
// says this Run holds (a [ShardHolder] store), and says why nothing
// happens when the first round finds them all held by other relays.
func (s *runState) noteShards(res BatchResult, first bool) {
	if s.shards == nil {
		return
	}
	r := s.r
	n := s.shards.HeldShards(s.owner)
	r.held.Store(int64(n))
	r.logLeaseLost(s.owner)
	if n != s.held {
		r.log.Info("relay: shards held", attrOwner, s.owner, attrShards, n, attrWas, s.held)
		s.held = n
	} else if first && n == 0 && res.Err == nil {
		// Say why nothing happens: other relays hold the shards
		// (they publish, or died and their leases run out).
		r.log.Info("relay: standing by: other relays hold the outbox's shards; this relay takes them over when they release them or their leases expire", attrOwner, s.owner)
	}
}

// failed handles a round that failed as a whole: it backs off, or hands
// the shards over when the broker has failed this relay for
// [Config.HandOverAfter], or claims again at once when the lease ended
// during the publish, and reports whether Run goes on.
func (s *runState) failed(ctx context.Context, res BatchResult, rd round) bool {
	r := s.r
	s.next = nil // claimed before the backoff: claim afresh after it
	if rd.leaseLost != "" && res.Err == nil {
		// Not an outage: the relay was paused past its lease, or lost
		// it. Claim again at once: the claim finds the shards taken
		// over, or renews the lease.
		s.warnLeaseLost(res, rd)
		return true
	}
	s.failures++
	if res.Err == nil {
		s.cut.failed(time.Now(), res.Duration, r.cfg.HandOverAfter)
	}
	var wait time.Duration
	if ctx.Err() == nil {
		wait = r.backoff(s.failures)
	}
	r.logFailure(res, s.failures, wait)
	if r.handOverer != nil && res.Err == nil && ctx.Err() == nil && s.cut.due(time.Now(), r.cfg.HandOverAfter) {
		if err := r.settle(s.marking); err != nil {
			r.log.Warn("relay: the last batch's mark failed; its messages will be published again", errAttr(err))
		}
		s.marking = nil
		if r.handOver(ctx, s.owner, &s.cut) {
			s.held = 0
			if !r.standAside(ctx, r.cfg.HandOverAfter) {
				return false
			}
			// The stand-aside is no quiet spell between failures: a
			// failure when it comes back goes on the streak, whose next
			// hand-over waits twice as long.
			s.cut.last = time.Now()
			r.log.Info("relay: stood aside; claiming again, as a standby while other relays hold the shards", attrOwner, s.owner)
			return true
		}
	}
	return wait > 0 && backoff.Sleep(ctx, wait)
}

// warnLeaseLost logs a batch whose lease ended, or that the store
// reported lost, during its publish (rd.leaseLost says why).
func (s *runState) warnLeaseLost(res BatchResult, rd round) {
	s.r.log.Warn("relay: the lease ended during a publish; its unpublished messages are published again by whichever relay holds their shards",
		attrOwner, s.owner, attrReason, rd.leaseLost, attrClaimed, res.Claimed, attrPublished, res.Published, attrDuration, res.Duration)
}

// wait waits, after a round that found nothing, for a wake-up: a
// notification, [Relay.Notify], the poll interval (shorter while the
// relay was recently busy, or when the store asked to be claimed again
// sooner), or ctx's end. A relay that may ask the store to wake it asks
// once, and claims once more right away instead, since a commit may have
// raced the request.
func (s *runState) wait(ctx context.Context, rd round) {
	r := s.r
	wait := time.Duration(r.poll.Load())
	if rd.again > 0 {
		wait = min(wait, rd.again)
	}
	switch {
	case time.Since(s.lastFound) < r.cfg.ActivePeriod:
		wait = min(wait, r.cfg.ActivePollInterval)
	case r.waker != nil && !s.requested && r.notifying.Load():
		if r.requestWake(ctx, s.owner, &s.wakeFailed) {
			s.requested = true
			return // claim once more: a commit may have raced the request
		}
	}
	s.poll.Reset(wait)
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-s.poll.C:
	}
}

// brokerOutage is a streak of rounds of which nothing could be published because
// the broker failed (see [failedWhole]), for [Config.HandOverAfter].
type brokerOutage struct {
	// since is when the streak's first round, or its first round since the
	// last hand-over, began; zero when no round failed so.
	since time.Time
	// last is when the streak's last failed round ended.
	last time.Time
	// handOvers counts the streak's hand-overs: each doubles the wait
	// before the next, up to 8 times HandOverAfter.
	handOvers int
	// asked is set once the store said, for the hand-over coming, whether
	// another relay is alive (see [PeerCounter]); alone is its answer.
	asked, alone bool
}

// failed records a round that failed as a whole, ending at now after
// took. A failure more than HandOverAfter after the last one starts a new
// streak: while the broker is down, a relay's rounds fail every few
// seconds (its backoff, the store's retry delay); one long quiet spell
// (nothing to publish) between two failures is not an outage that lasted.
func (o *brokerOutage) failed(now time.Time, took, after time.Duration) {
	if !o.last.IsZero() && after > 0 && now.Add(-took).Sub(o.last) > after {
		*o = brokerOutage{}
	}
	if o.since.IsZero() {
		o.since = now.Add(-took)
	}
	o.last = now
}

// due reports whether the streak has lasted long enough, at now, for a
// hand-over after the given HandOverAfter (negative: never).
func (o *brokerOutage) due(now time.Time, after time.Duration) bool {
	return after > 0 && !o.since.IsZero() && !now.Before(o.at(after))
}

// at is when the streak is due for a hand-over after HandOverAfter, zero
// when no round failed so.
func (o *brokerOutage) at(after time.Duration) time.Time {
	if o.since.IsZero() {
		return time.Time{}
	}
	return o.since.Add(after << min(o.handOvers, 3))
}

// handOverAt is when a round starting at now must end its publish for the
// hand-over of cut to come on time: zero when none is coming (hand-overs
// are off, the store cannot hand over, nothing failed, or the last failure
// is more than HandOverAfter old, so that the next one starts a new
// streak), when it is due already (the check after the round hands over),
// or when it cannot happen: a [PeerCounter] store says no other relay is
// alive to take the shards, so cutting the publish short would only
// abandon a publish the broker may yet confirm, and send it again. The
// store is asked once per hand-over, when the publish could run past it,
// and its answer kept in cut; a store that cannot be asked, or fails to
// answer, counts as having peers.
func (r *Relay) handOverAt(ctx context.Context, owner string, cut *brokerOutage, now time.Time) time.Time {
	after := r.cfg.HandOverAfter
	if r.handOverer == nil || cut.since.IsZero() || now.Sub(cut.last) > after {
		return time.Time{}
	}
	at := cut.at(after)
	if !at.After(now) {
		return time.Time{}
	}
	if pc, ok := r.handOverer.(PeerCounter); ok && !cut.asked && at.Before(now.Add(r.cfg.PublishTimeout)) {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
		n, err := pc.OthersAlive(pctx, owner)
		cancel()
		cut.asked, cut.alone = true, err == nil && n == 0
		if err != nil {
			r.log.Debug("relay: counting the other relays alive failed", errAttr(err))
		}
	}
	if cut.alone {
		return time.Time{}
	}
	return at
}

// handOver asks the [HandOverer] store to hand the owner's shards over to
// the other relays alive, and reports whether it did. Either way the wait
// before the next attempt starts again: with no other relay alive, it asks
// again once the streak has gone on as long again.
func (r *Relay) handOver(ctx context.Context, owner string, cut *brokerOutage) bool {
	lasted := time.Since(cut.since).Round(time.Millisecond)
	hctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	done, err := r.handOverer.HandOver(hctx, owner)
	cancel()
	cut.since = time.Time{}
	cut.asked, cut.alone = false, false // ask again before the next one
	switch {
	case err != nil:
		r.log.Warn("relay: hand-over failed; keeping the shards", attrOwner, owner, errAttr(err))
		return false
	case !done:
		r.log.Info("relay: nothing published for a while, and no other relay is alive to take the shards over; keeping them",
			attrOwner, owner, attrFor, lasted)
		return false
	}
	cut.handOvers++
	r.held.Store(0)
	r.log.Warn("relay: handed its shards over to the other relays: nothing it claimed could be published",
		attrOwner, owner, attrFor, lasted, attrStandAside, r.cfg.HandOverAfter)
	return true
}

// standAside waits d without claiming, as a relay that handed its shards
// over does, and reports whether ctx is still live. The wait counts as
// progress (see [Relay.LastProgress]): the relay is not stuck, it leaves
// the outbox to others.
func (r *Relay) standAside(ctx context.Context, d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		r.progress.Store(time.Now().UnixNano())
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if !backoff.Sleep(ctx, min(left, time.Duration(r.poll.Load()))) {
			return false
		}
	}
}

// requestWake asks the store to wake the relay's owner, and reports
// whether it did. A failure is logged at Warn once, then at Debug until a
// request succeeds again (logged at Info): the relay asks again each time
// it goes idle, and a lasting cause (a table migrated without the store's
// wake-up register, a missing privilege) would otherwise log a warning at
// every poll. failed carries the streak between calls.
func (r *Relay) requestWake(ctx context.Context, owner string, failed *bool) bool {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	err := r.waker.RequestWake(rctx, owner)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil && !*failed:
		*failed = true
		r.log.Warn("relay: wake request failed, polling", errAttr(err))
		return false
	case err != nil:
		r.log.Debug("relay: wake request failed again, polling", errAttr(err))
		return false
	case *failed:
		*failed = false
		r.log.Info("relay: wake request succeeded again")
	}
	return true
}

// coalesce is how long the relay waits, after a round that claimed rd's
// batch, before it claims again (see [Config.CoalesceRows]): zero after a
// full batch, a batch claimed ahead, or one of fewer than CoalesceRows
// messages.
func (r *Relay) coalesce(res BatchResult, rd round) time.Duration {
	rows := r.cfg.CoalesceRows
	if rows <= 0 || res.Full || rd.next != nil || res.Claimed < rows {
		return 0
	}
	return min(r.cfg.ActivePollInterval*time.Duration(res.Claimed)/time.Duration(rows), r.cfg.CoalesceMax)
}
