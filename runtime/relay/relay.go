package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/internal/backoff"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/internal/logattr"
)

// Log attribute keys, defined once so every log line uses the same names.
const (
	attrTopic           = "topic"
	attrOutboxID        = "outbox_id"
	attrEventID         = "event_id"
	attrEventType       = "event_type"
	attrMessages        = "messages"
	attrAttempt         = "attempt"
	attrBackoff         = "backoff"
	attrClaimed         = "claimed"
	attrPublished       = "published"
	attrDuration        = "duration"
	attrBatchSize       = "batch_size"
	attrPollInterval    = "poll_interval"
	attrNotifier        = "notifier"
	attrShards          = "shards"
	attrWas             = "was"
	attrShutdownTimeout = "shutdown_timeout"
	attrPermanent       = "permanent"
	attrOwner           = "owner"
	attrFor             = "for"
	attrStandAside      = "stand_aside"
)

// Relay moves messages from a [Store] to a Watermill message.Publisher:
// it claims a batch, publishes it, lets the store mark what was published, and
// repeats. Create one with [New] and start it with [Relay.Run].
//
// A Relay is safe for concurrent use: [Relay.Notify] and [Relay.Running] may
// be called from any goroutine.
type Relay struct {
	store    Store
	notifier Notifier      // the store as a Notifier, or nil
	waker    WakeRequester // the store as a WakeRequester (and a Notifier), or nil
	// handOverer is the store as a HandOverer, or nil (hand-overs are off
	// when HandOverAfter is negative too).
	handOverer HandOverer
	pub        message.Publisher
	cfg        Config
	log        *slog.Logger

	// poll is the poll interval in force, a time.Duration. It starts at
	// cfg.PollInterval and drops to DefaultPollInterval when the store
	// turns out unable to notify and PollInterval was left at its default.
	poll          atomic.Int64
	pollDefaulted bool
	// notifying is set while the store's notifications may wake the
	// relay: it has a Notifier whose Listen has not reported
	// errors.ErrUnsupported.
	notifying atomic.Bool

	wake        chan struct{} // capacity 1: a pending wake-up
	running     chan struct{} // closed by markRunning
	runningOnce sync.Once
	active      atomic.Bool // a Run call is in progress
	// progress is the end of Run's last round that did not fail as a
	// whole, in Unix nanoseconds (0: none yet); see LastProgress.
	progress atomic.Int64
	// held is how many shards Run's owner held at its last claim, -1 when
	// not running or the store does not say; see ShardsHeld.
	held atomic.Int64

	since func(time.Time) time.Duration // tests only: time.Since
}

// New returns a relay that claims messages from store and publishes them with
// pub. It applies the defaults documented on [Config] and returns an error
// wrapping [ErrInvalidConfig] when cfg is invalid (see [Config.Validate]) or
// store or pub is nil.
//
// If store also implements [Notifier], [Relay.Run] listens for its
// notifications and polls less often (see [Config.PollInterval]).
//
// The relay never closes pub; the caller does, after Run has returned.
func New(store Store, pub message.Publisher, cfg Config) (*Relay, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: nil publisher", ErrInvalidConfig)
	}
	notifier, _ := store.(Notifier)
	if c, ok := store.(NotifyChecker); ok && !c.CanNotify() {
		notifier = nil
	}
	pollDefaulted := cfg.PollInterval == 0
	cfg.setDefaults(notifier != nil)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CloudEvents != nil {
		ce := *cfg.CloudEvents // the caller may change its copy later
		cfg.CloudEvents = &ce
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	r := &Relay{
		store:         store,
		notifier:      notifier,
		pub:           pub,
		cfg:           cfg,
		log:           logger,
		pollDefaulted: pollDefaulted,
		wake:          make(chan struct{}, 1),
		running:       make(chan struct{}),
	}
	r.poll.Store(int64(cfg.PollInterval))
	r.held.Store(-1)
	if h, ok := store.(HandOverer); ok && cfg.HandOverAfter > 0 {
		r.handOverer = h
	}
	if notifier != nil {
		r.waker, _ = store.(WakeRequester)
		r.notifying.Store(true)
	}
	return r, nil
}

// Run relays messages until ctx is cancelled. It blocks.
//
// Each round claims up to [Config.BatchSize] messages with [Store.Claim] and
// publishes them. After a claim that found messages Run claims again at
// once. After one that found nothing, within [Config.ActivePeriod] of its
// last claim that found messages, it claims again after
// [Config.ActivePollInterval]; once idle, it asks a
// [WakeRequester] store for a notification, claims once more, and then waits
// for a wake-up: a [Notifier] notification, a [Relay.Notify] call, or
// [Config.PollInterval] elapsing. A wake-up cuts every wait short. When a batch fails as a whole (the store
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

	// The listener starts at the first claim that does not say the store
	// hands this relay nothing yet (an empty batch with
	// Batch.ClaimAgainIn): a relay that starts as a standby (sqlstore's
	// StoreConfig.MaxActiveRelays) has nothing to be woken for, and holds
	// no connection for it, until it takes shards over. Once started, the
	// listener runs until Run returns.
	listenCtx, stopListening := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopListening()
	listening := r.notifier == nil
	if listening {
		r.markRunning()
	}

	// The name this Run claims under: the owner of its leases in the
	// store (sqlstore's <table>_leases), logged so that an operator can
	// tell which process holds which shards.
	owner := uuid.NewString()
	r.log.Info("relay: started",
		attrOwner, owner,
		attrBatchSize, r.cfg.BatchSize,
		attrPollInterval, r.cfg.PollInterval,
		attrNotifier, r.notifier != nil)
	// The stop is logged last, after the batch in flight was finished and
	// marked (or gave up) and the leases were released, saying which.
	var last BatchResult // the last batch's, claimed before or at the stop
	var lastMarked error // its mark's outcome, when the mark ran in the background
	defer func() {
		attrs := []any{attrOwner, owner, attrClaimed, last.Claimed, attrPublished, last.Published}
		switch {
		case last.Claimed == 0:
			r.log.Info("relay: stopped; no batch was in flight", attrs...)
		case last.Err != nil || lastMarked != nil:
			r.log.Info("relay: stopped; the last batch was not marked: whoever holds its shards next publishes it again", append(attrs, errAttr(cmp.Or(lastMarked, last.Err)))...)
		default:
			r.log.Info("relay: stopped; the last batch was published and marked", attrs...)
		}
	}()

	if rel, ok := r.store.(Releaser); ok {
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StoreTimeout)
			defer cancel()
			if err := rel.Release(rctx, owner); err != nil {
				r.log.Warn("relay: release failed", errAttr(err))
			}
		}()
	}

	poll := time.NewTimer(time.Duration(r.poll.Load()))
	defer poll.Stop()
	failures := 0            // consecutive failed batches
	var lastFound time.Time  // the last claim that found messages
	requested := false       // the store was asked to wake this relay
	wakeFailed := false      // the last wake request failed (warned once)
	var next *aheadBatch     // a batch claimed while the last one was published
	var marking *pendingMark // the last batch's mark, running in the background
	defer func() {
		// Run returns once the last batch's mark has ended (within
		// ShutdownTimeout of ctx's end); one that failed leaves its
		// messages to be published again.
		if err := r.settle(marking); err != nil {
			lastMarked = err
			r.log.Warn("relay: the last batch's mark failed; its messages will be published again", errAttr(err))
		}
	}()
	shards, _ := r.store.(ShardHolder)
	held := 0 // shards the store said this Run holds, when it tells
	var cut brokerOutage
	defer r.held.Store(-1)
	for first := true; ctx.Err() == nil; first = false {
		res, rd := r.batch(ctx, owner, next, marking, r.handOverAt(ctx, owner, &cut, time.Now()))
		next, marking = rd.next, rd.marking
		if res.Claimed > 0 || ctx.Err() == nil {
			last = res
		}
		if shards != nil {
			n := shards.HeldShards(owner)
			r.held.Store(int64(n))
			r.logLeaseLost(owner)
			if n != held {
				r.log.Info("relay: shards held", attrOwner, owner, attrShards, n, attrWas, held)
				held = n
			} else if first && n == 0 && res.Err == nil {
				// Say why nothing happens: other relays hold the shards
				// (they publish, or died and their leases run out).
				r.log.Info("relay: standing by: other relays hold the outbox's shards; this relay takes them over when they release them or their leases expire", attrOwner, owner)
			}
		}
		if !listening {
			if res.Err == nil && res.Claimed == 0 && rd.again > 0 {
				// Nothing to listen for yet: it claims again by then.
				r.markRunning()
			} else {
				listening = true
				wg.Go(func() { r.listen(listenCtx) })
			}
		}
		if rd.timedOut {
			r.log.Warn("relay: shutdown timeout exceeded, batch released",
				attrClaimed, res.Claimed,
				attrShutdownTimeout, r.cfg.ShutdownTimeout,
				errAttr(res.Err))
			break
		}
		switch {
		case res.Err != nil || failedWhole(res):
			// The store failed, or nothing could be published and not only
			// because messages were rejected for good: the broker or the
			// database is down. Back off.
			next = nil // claimed before the backoff: claim afresh after it
			if rd.leaseLost != "" && res.Err == nil {
				// Not an outage: the relay was paused past its lease,
				// or lost it. Claim again at once: the claim finds the
				// shards taken over, or renews the lease.
				r.log.Warn("relay: the lease ended during a publish; its unpublished messages are published again by whichever relay holds their shards",
					attrOwner, owner, attrReason, rd.leaseLost, attrClaimed, res.Claimed, attrPublished, res.Published, attrDuration, res.Duration)
				continue
			}
			failures++
			if res.Err == nil {
				cut.failed(time.Now(), res.Duration, r.cfg.HandOverAfter)
			}
			var wait time.Duration
			if ctx.Err() == nil {
				wait = r.backoff(failures)
			}
			r.logFailure(res, failures, wait)
			if r.handOverer != nil && res.Err == nil && ctx.Err() == nil && cut.due(time.Now(), r.cfg.HandOverAfter) {
				if err := r.settle(marking); err != nil {
					r.log.Warn("relay: the last batch's mark failed; its messages will be published again", errAttr(err))
				}
				marking = nil
				if r.handOver(ctx, owner, &cut) {
					held = 0
					if !r.standAside(ctx, r.cfg.HandOverAfter) {
						return nil
					}
					// The stand-aside is no quiet spell between failures:
					// a failure when it comes back goes on the streak,
					// whose next hand-over waits twice as long.
					cut.last = time.Now()
					r.log.Info("relay: stood aside; claiming again, as a standby while other relays hold the shards", attrOwner, owner)
					continue
				}
			}
			if wait == 0 || !backoff.Sleep(ctx, wait) {
				return nil
			}
			continue
		case res.Failed > 0:
			// Partial: the publisher works; the failed messages wait in the
			// store for their retry, and the relay goes on.
			r.logFailure(res, 1, 0)
		}
		// A batch marked in the background has not ended yet: it counts
		// once its mark has succeeded (see settle), as does the streak of
		// failures it would end.
		if rd.marking == nil || rd.settled {
			failures = 0
		}
		if rd.marking == nil {
			r.progress.Store(time.Now().UnixNano())
		}
		if res.Published > 0 {
			cut = brokerOutage{} // the broker takes this relay's messages
		}
		if res.Claimed > 0 {
			r.log.Debug("relay: batch published",
				attrClaimed, res.Claimed,
				attrPublished, res.Published,
				attrDuration, res.Duration)
			lastFound = time.Now()
			requested = false // the claim ended the store's wake request
		}
		if res.Claimed > 0 {
			// More may be pending, or on its way: a claim that finds
			// nothing ends the streak.
			continue
		}
		wait := time.Duration(r.poll.Load())
		if rd.again > 0 {
			wait = min(wait, rd.again)
		}
		switch {
		case time.Since(lastFound) < r.cfg.ActivePeriod:
			wait = min(wait, r.cfg.ActivePollInterval)
		case r.waker != nil && !requested && r.notifying.Load():
			if r.requestWake(ctx, owner, &wakeFailed) {
				requested = true
				continue // claim once more: a commit may have raced the request
			}
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-poll.C:
		}
	}
	return nil
}

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

// Notify wakes the relay: a waiting [Relay.Run] claims at once, and a Run in
// the middle of a batch claims again right after it. Notifications are
// coalesced, so Notify never blocks and is safe to call from any goroutine,
// typically right after a transaction that wrote outbox rows commits, for
// stores that cannot notify (SQLite). Calling Notify while no Run is running
// is harmless.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Running returns a channel that is closed once [Relay.Run] has started its
// loop and, when the store implements [Notifier], the first [Notifier.Listen]
// call is listening (or has failed: polling covers for it), or the first
// claim said the store hands the relay nothing yet (a standby: see
// [Batch.ClaimAgainIn]). It stays closed after Run returns.
func (r *Relay) Running() <-chan struct{} {
	return r.running
}

// ShardsHeld returns how many of the outbox's shards the running relay
// held at its last claim, when its store divides the outbox among relays
// (sqlstore.Store: 0 for a relay standing by, all of them for the active
// one by default), and -1 when the relay is not running or its store does
// not say. adapters/metrics exports it as outbox_relay_shards_held, so that
// an operator can tell which relay publishes.
func (r *Relay) ShardsHeld() int { return int(r.held.Load()) }

// LastProgress returns when [Relay.Run] last ended a round that did not
// fail as a whole: a claim that found nothing to do, or a batch the store
// claimed and marked of which at least one message was published or whose
// failures were all the messages' own (rejected for good, parked). It is
// the zero time before the first such round. A running relay that is not
// stuck makes progress at least once per [Config.PollInterval] when idle
// and once per batch when busy, so a LastProgress older than PollInterval
// plus [Config.PublishTimeout] and twice [Config.StoreTimeout] means the
// relay is not running, or it cannot reach its store, or every message it
// claims fails to publish (it backs off and retries meanwhile). A store
// holds a failed message back until its retry time, and claims that find
// nothing else to do meanwhile count as progress: a lasting broker outage
// shows in the age of the oldest pending message ([Stats]), not here.
// Health checks (runtime/health) use it.
// It is safe to call from any goroutine.
func (r *Relay) LastProgress() time.Time {
	n := r.progress.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (r *Relay) markRunning() {
	r.runningOnce.Do(func() { close(r.running) })
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
// and returns it; and it marks this batch in the background, while the
// next one is published: the round after waits for that mark before it
// marks its own batch, and leaves its batch unmarked when that mark
// failed, so that both batches are published again, in order. It reports
// what happened, and the rest of the round in rd; a batch marked in the
// background is reported to OnBatch by the round after, once its mark has
// ended.
func (r *Relay) batch(ctx context.Context, owner string, pre *aheadBatch, prev *pendingMark, handOverAt time.Time) (res BatchResult, rd round) {
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
	if !ok {
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
		rd.leaseLost = "the store reported the lease lost"
	case errors.Is(cause, errLeaseEnded) && r.late(deadline) > pausedAfter:
		rd.leaseLost = "the relay was paused past the lease's end"
	}
	stopLost()
	cancel()
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
	if ahead != nil {
		rd.next = <-ahead
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

// logFailure logs a failed batch: the store's error, or one line per
// distinct error naming the first message that failed with it (its outbox
// id, topic, event id and type, found among res.Messages).
func (r *Relay) logFailure(res BatchResult, attempt int, wait time.Duration) {
	attrs := []any{attrAttempt, attempt}
	if wait > 0 {
		attrs = append(attrs, attrBackoff, wait)
	}
	if res.Err != nil {
		r.log.Warn("relay: batch failed",
			append([]any{errAttr(res.Err), attrClaimed, res.Claimed, attrPublished, res.Published}, attrs...)...)
		return
	}
	// One line per distinct error, the message's own id left out: an
	// adapter that names each message in its error ("publish message <id>
	// ...: EOF") failing a whole batch is one failure, not five lines.
	seen := map[string]bool{}
	for _, f := range res.Failures {
		if errors.Is(f.Err, errEarlierFailed) {
			continue
		}
		var m runtime.OutboxMessage
		for _, c := range res.Messages {
			if c.ID == f.ID {
				m = c
				break
			}
		}
		k := f.Err.Error()
		if m.EventID != (uuid.UUID{}) {
			k = strings.ReplaceAll(k, m.EventID.String(), "")
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		r.log.Warn("relay: publish failed",
			append([]any{
				attrOutboxID, f.ID,
				attrTopic, m.Topic,
				attrEventID, m.EventID.String(),
				attrEventType, m.EventType,
				attrMessages, res.Failed,
				attrPublished, res.Published,
				attrPermanent, f.Permanent,
				errAttr(f.Err),
			}, attrs...)...)
		if len(seen) >= 5 {
			break
		}
	}
}

// listen calls Listen until ctx is done, backing off after each failure.
func (r *Relay) listen(ctx context.Context) {
	failures := 0
	for {
		var heard atomic.Bool
		err := r.notifier.Listen(ctx, func() {
			heard.Store(true)
			r.markRunning()
			r.Notify()
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errors.ErrUnsupported) {
			r.notifying.Store(false)
			if r.pollDefaulted {
				r.poll.Store(int64(DefaultPollInterval))
				r.Notify() // re-arm the poll timer with the shorter interval
			}
			r.markRunning()
			r.log.Info("relay: store cannot notify, polling only",
				errAttr(err),
				attrPollInterval, time.Duration(r.poll.Load()))
			return
		}
		r.markRunning() // do not hold Running back: polling covers for Listen
		if heard.Load() {
			failures = 0 // it was listening: the connection was lost
		}
		failures++
		wait := r.backoff(failures)
		r.log.Warn("relay: listen failed", errAttr(err), attrAttempt, failures, attrBackoff, wait)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// backoff returns how long to wait after the attempt-th consecutive failure: a
// random duration between half and all of min(MinBackoff*2^(attempt-1),
// MaxBackoff).
func (r *Relay) backoff(attempt int) time.Duration {
	return max(backoff.Jitter(backoff.Exponential(r.cfg.MinBackoff, r.cfg.MaxBackoff, attempt)), 1)
}

// errAttr is the log attribute of an error: its message on one line (see
// logattr.Error).
func errAttr(err error) slog.Attr { return logattr.Error(err) }
