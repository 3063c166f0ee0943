package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

type ownerLease struct {
	// claimMu serializes the owner's claims, wake-up requests and release.
	claimMu sync.Mutex

	mu     sync.Mutex // guards the fields below
	shards []int16    // sorted; replaced, never modified in place
	// claimable are the shards claims read: shards less those leaving
	// (see givingBack). Replaced, never modified in place.
	claimable  []int16
	validUntil time.Time // local clock, conservative
	nextRenew  time.Time
	alive      int  // relays alive at the last renewal
	short      bool // holds less than its share: taking shards over
	standby    bool // outranked by MaxActiveRelays others: holds no shard
	// nextLook is when a standby's claim next looks for shards nobody
	// holds (one read), to renew, and take them, at once.
	nextLook time.Time
	// freeSince is when a standby's looks began to find shards nobody
	// holds (zero while they find none). Shards that stay free for
	// rescueAfter are ones the relays that outrank it leave, and it takes
	// them: rescued.
	freeSince time.Time
	// rescued is set while an outranked owner holds shards that the relays
	// above it left free: it keeps them rather than stand by.
	rescued bool
	// takeEvery is how soon a short owner renews again to take shards
	// over: minTakeEvery after a renewal that took some and for
	// minTakeTries renewals after that took none (takeTries counts them),
	// then doubling after each, up to maxTakeEvery.
	takeEvery time.Duration
	takeTries int
	waiting   bool // RequestWake asked writers to notify for the owner
	// lastClaimed is how many rows the last claim found: the next claim's
	// first guess of its size.
	lastClaimed int
	// renewing is closed when the renewal running in the background ends;
	// nil when none runs. cancelRenew ends it (the session lock ended: it
	// may hang on a connection cut off with the lock's).
	renewing    chan struct{}
	cancelRenew context.CancelFunc
	// giveBack is set by a background renewal that found the owner holding
	// more than its share, or by a claim that saw more active relays than
	// the last renewal: the next claim renews in line, and gives the
	// surplus back (a background renewal never gives shards back, since a
	// batch of them may be in flight).
	giveBack bool
	// released is set by Release: no background renewal starts after it.
	released bool
	// lock is the owner's session lock (see session.go), or nil.
	lock *ownerLock
	// ghost is the session id of the owner's last lock, which ended on
	// the owner's side: the next lock ends it if it still holds the lock.
	ghost int64
	// relock is set when the session lock ended: the next renewal takes a
	// lock again and gives the owner's rows back first, as a relay that
	// starts.
	relock bool
	// lost is closed when the owner's batches claimed so far may no
	// longer be published (relay.Batch.Lost), and replaced.
	lost chan struct{}
	// loss is the last loss of shards, until LeaseLost reports it.
	loss *leaseLoss
	// leaseEnd is when the leases written by the last renewal expire, on
	// the local clock (about: the database's clock writes them).
	leaseEnd time.Time
	// last is the last batch the owner claimed: when the next claim
	// lists it as in flight (the relay claims ahead while it publishes and
	// marks it), its shards are not given back, since the batch's mark is fenced by the
	// lease: a shard given back before the mark would leave its published
	// rows pending, and the next owner would publish them again.
	last []runtime.OutboxMessage
}

// renewWhenDue renews the owner's leases in line when the claim needs it
// (see [Store.Claim]), or starts a background renewal when one is due. The
// caller holds o.claimMu.
//
// A renewal's transaction commits durably (a lease lost in a database
// crash would let two relays publish one shard), so in line it would add
// a commit's flush and half a dozen round trips to every claim that falls
// due, about once a second; at 1,000 events/s those claims were most of
// the commit-to-publish p99.
func (s *Store) renewWhenDue(ctx context.Context, owner string, o *ownerLease, inFlight []int64) error {
	o.mu.Lock()
	if !s.renewInLine(o, time.Now()) {
		if !time.Now().Before(o.nextRenew) && o.renewing == nil && !o.released {
			done := make(chan struct{})
			o.renewing = done
			// The transaction carries server-side timeouts of LeaseTTL/2 too.
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaseTTL/2)
			o.cancelRenew = cancel
			go s.renewInBackground(ctx, cancel, owner, o, done)
		}
		o.mu.Unlock()
		return nil
	}
	for o.renewing != nil {
		done := o.renewing
		o.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("sqlstore: lease: waiting for the renewal in progress: %w", ctx.Err())
		}
		o.mu.Lock()
	}
	if !s.renewInLine(o, time.Now()) {
		o.mu.Unlock() // the background renewal did it
		return nil
	}
	busy := o.busyShards(inFlight)
	o.mu.Unlock()
	return retryTransient(ctx, func() error { return s.renew(ctx, owner, o, busy) })
}

// busyShards returns the shards that must not be given back during a claim
// with inFlight in flight: none when nothing is in flight, the last batch's
// when inFlight is that batch, and every shard (nil) when it is not known.
// The caller holds o.mu. Only a renewal in line asks, so claims pay
// nothing for it.
func (o *ownerLease) busyShards(inFlight []int64) *[Shards]bool {
	busy := &[Shards]bool{}
	if len(inFlight) == 0 {
		return busy
	}
	if len(inFlight) != len(o.last) {
		return nil
	}
	for i, m := range o.last {
		if m.ID != inFlight[i] {
			return nil
		}
		busy[ShardOf(m.AggregateType, m.AggregateID)] = true
	}
	return busy
}

// renewInLine reports whether a claim at now must renew before it reads:
// less than half of LeaseTTL is left (none before the first renewal), a
// background renewal asked to give shards back, or the owner holds no
// shard and a renewal is due. The caller holds o.mu.
func (s *Store) renewInLine(o *ownerLease, now time.Time) bool {
	return !now.Before(o.validUntil.Add(-s.cfg.LeaseTTL/2)) || o.giveBack ||
		len(o.shards) == 0 && !now.Before(o.nextRenew)
}

// renewInBackground renews the owner's leases beside its claims, then
// closes done. A failure is retried at a claim a little later, and
// reported by the claim that renews in line once the lease runs short.
func (s *Store) renewInBackground(ctx context.Context, cancel context.CancelFunc, owner string, o *ownerLease, done chan struct{}) {
	defer close(done)
	defer cancel()
	err := s.renew(ctx, owner, o, nil)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.renewing, o.cancelRenew = nil, nil
	if err != nil {
		o.nextRenew = time.Now().Add(min(s.cfg.LeaseTTL/20, 250*time.Millisecond))
	}
}

// renew registers the owner as alive, renews its leases and takes or gives
// back shards to hold its even share, in one short transaction, then
// records the outcome in o. It gives back no shard of busy (every shard
// when busy is nil, as in the background), and leaves o.giveBack set when
// that keeps it above its share. In line, the caller holds o.claimMu; in
// the background, no other renewal of the owner runs.
func (s *Store) renew(ctx context.Context, owner string, o *ownerLease, busy *[Shards]bool) (err error) {
	// The session lock comes first: others take an owner for dead only
	// once they have seen its lock held, or found it registered as holding
	// it (session_lock), and then found the lock free.
	lock, err := s.lockOwner(ctx, owner, o)
	if err != nil {
		return err
	}
	start := time.Now()
	ttl := s.cfg.LeaseTTL
	// One connection for the transaction and the guard's restore after it.
	conn, err := s.conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: connect: %w", err)
	}
	guarded := false // the session carries the guard's timeouts
	defer func() {
		if guarded { // the pool must not hand this session out again
			conn.Discard()
			return
		}
		s.release(ctx, conn, err)
	}()
	tx, err := conn.BeginTx(ctx, s.dialect.leaseTx())
	if err != nil {
		return fmt.Errorf("sqlstore: lease: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	restore, err := s.dialect.guardLeaseTx(ctx, tx, ttl/2)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: %w", err)
	}
	guarded = restore != nil
	l := s.lease
	o.mu.Lock()
	heldNone, rescued, freeSince, relock := len(o.shards) == 0, o.rescued, o.freeSince, o.relock
	held, leaseEnd := o.shards, o.leaseEnd
	o.mu.Unlock()
	if relock {
		// The owner's session ended and it dropped its shards: it gives
		// its rows back, as a relay that starts, and takes its share
		// again, beside relays that may be taking its rows over.
		if err = l.release(ctx, tx, owner, nil); err != nil {
			return fmt.Errorf("sqlstore: lease: give back the shards of an ended session: %w", err)
		}
		held = nil
	}
	// Relays whose session lock has been free for the grace are dead:
	// their shards are free from now on.
	dead, due, err := s.lookAtLocks(ctx, tx, owner, start)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: look at the relays' session locks: %w", err)
	}
	for _, d := range dead {
		if err = l.release(ctx, tx, d, nil); err != nil {
			return fmt.Errorf("sqlstore: lease: take over relay %q, whose session ended: %w", d, err)
		}
		if err = l.unregister(ctx, tx, d); err != nil {
			return fmt.Errorf("sqlstore: lease: take over relay %q, whose session ended: %w", d, err)
		}
	}
	if err = l.register(ctx, tx, owner, start, ttl, lock != nil); err != nil {
		return fmt.Errorf("sqlstore: lease: register relay: %w", err)
	}
	alive, err := l.alive(ctx, tx, start)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: count relays: %w", err)
	}
	owned, err := l.renew(ctx, tx, owner, start, ttl)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: renew: %w", err)
	}
	// Shards held at the last renewal and not now were taken: the lease
	// had expired, or others found the owner's session lock free.
	var loss *leaseLoss
	if n := len(held) - countHeld(held, owned); n > 0 {
		loss = &leaseLoss{reason: LossTakenOver, shards: n}
		if late := start.Sub(leaseEnd); late >= 0 {
			loss.reason, loss.late = LossExpired, late
		}
	}
	m := s.cfg.MaxActiveRelays // at least 1 (setDefaults)
	active, standby, rescue, free := min(max(alive, 1), m), false, false, 0
	others, err := l.holders(ctx, tx, owner, start)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: count other relays' shards: %w", err)
	}
	if outranked(owner, len(owned), others) >= m {
		// Stand by, unless the relays above leave shards free (they
		// run another MaxActiveRelays, or an earlier version that
		// shares the shards with every relay alive): hold those.
		if rescued || !freeSince.IsZero() && start.Sub(freeSince) >= s.rescueAfter() {
			if free, err = l.free(ctx, tx, start); err != nil {
				return fmt.Errorf("sqlstore: lease: count free shards: %w", err)
			}
		}
		rescue = free > 0 || rescued && len(owned) > 0
		standby = !rescue
	}
	target := (Shards + active - 1) / active
	switch {
	case standby:
		target = 0 // give every shard back, as a surplus
	case rescue:
		target = len(owned) + free
	}
	giveBack, took := false, 0
	var leaving []int16
	switch {
	case len(owned) > target:
		var kept, surplus []int16
		kept, surplus, leaving = givingBack(owned, target, busy)
		giveBack = len(leaving) > 0 // at a later claim, in line
		if len(surplus) > 0 {
			if err := l.release(ctx, tx, owner, surplus); err != nil {
				return fmt.Errorf("sqlstore: lease: give back shards: %w", err)
			}
		}
		owned = kept
	case len(owned) < target:
		got, err := l.acquire(ctx, tx, owner, start, ttl, target-len(owned))
		if err != nil {
			return fmt.Errorf("sqlstore: lease: take shards: %w", err)
		}
		took = len(got)
		owned = append(owned, got...)
		slices.Sort(owned)
	}
	if err := l.forget(ctx, tx, start); err != nil {
		return fmt.Errorf("sqlstore: lease: forget stopped relays: %w", err)
	}
	if s.inRenew != nil {
		s.inRenew()
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sqlstore: lease: commit: %w", err)
	}
	// The leases are renewed whether or not the restore succeeds: a
	// connection it fails on is closed, not pooled (see above).
	guarded = guarded && restore(ctx, conn) != nil
	// The wake-up request is extended outside the lease transaction: a
	// register that is missing or not writable leaves the relay to poll
	// (its RequestWake reports that), and must not undo its leases.
	requested := s.extendWake(ctx, o, len(owned) > 0)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != lock {
		// The session lock ended during the renewal: the owner holds
		// nothing (see lockLost); its next renewal starts afresh.
		return errors.New("sqlstore: lease: the session lock ended during the renewal")
	}
	o.relock = false
	if loss != nil {
		o.loss = loss
		o.endBatches()
	}
	o.leaseEnd = start.Add(ttl)
	if !due.IsZero() && due.Before(o.nextLook) {
		o.nextLook = due
	}
	o.shards, o.alive, o.short, o.giveBack = owned, alive, len(owned) < target, giveBack
	o.standby, o.rescued = standby, rescue && len(owned) > 0
	if !standby {
		o.freeSince = time.Time{}
	}
	if requested && heldNone {
		// The owner took shards over while it waits: wake it once more
		// for the rows of writers that read the register before this.
		s.settleWake()
	}
	o.claimable = owned
	if len(leaving) > 0 {
		o.claimable = slices.DeleteFunc(slices.Clone(owned), func(sh int16) bool { return slices.Contains(leaving, sh) })
	}
	// The database's expiry is its now() plus ttl, and its now() came after
	// start: start plus ttl, less a margin for clock rate, is on the safe
	// side.
	o.validUntil = start.Add(ttl - ttl/10)
	// Renewing also rebalances (an active relay that joined or left changes
	// every share), so do it at least every second.
	every := min(ttl/5, time.Second)
	if len(owned) < target {
		// Still taking its share: the relays that hold it give shards
		// back within a batch or two of seeing this one alive, so look
		// again soon, and less often once none came for a while.
		switch {
		case took > 0 || o.takeEvery == 0:
			o.takeEvery, o.takeTries = minTakeEvery, 0
		case o.takeTries < minTakeTries:
			o.takeTries++
		default:
			o.takeEvery = min(2*o.takeEvery, maxTakeEvery)
		}
		every = min(every, o.takeEvery)
	} else {
		o.takeEvery, o.takeTries = 0, 0
	}
	if standby {
		o.nextLook = start.Add(standbyEvery)
	}
	o.nextRenew = start.Add(every)
	if !due.IsZero() && due.Before(o.nextRenew) {
		// A relay's session lock was free: renew once the grace has
		// passed, to take it over if it still is.
		o.nextRenew = due
	}
	return nil
}

// countHeld counts the shards of held (sorted) that are in owned (sorted).
func countHeld(held, owned []int16) int {
	n := 0
	for _, sh := range held {
		if _, ok := slices.BinarySearch(owned, sh); ok {
			n++
		}
	}
	return n
}

// rescueAfter is how long shards must stay free before a relay that the
// active ones outrank takes them (see ownerLease.freeSince): longer than
// an active relay short of its share takes to take them (it looks every
// 5 to 250 ms).
func (s *Store) rescueAfter() time.Duration { return max(time.Second, s.cfg.LeaseTTL/5) }

// standbyEvery is how often a relay that stands by (see
// StoreConfig.MaxActiveRelays) looks for shards nobody holds, and so how
// soon it takes over the shards an active relay released.
const standbyEvery = 250 * time.Millisecond

// outranked counts the relays of others (owner to shards held) that stay
// active before owner, which holds mine: those holding more, and, of
// those holding as many, those whose name sorts first.
func outranked(owner string, mine int, others map[string]int) int {
	n := 0
	for o, held := range others {
		if held > mine || held == mine && o < owner {
			n++
		}
	}
	return n
}

// givingBack splits owned (sorted), of which the owner should hold target,
// into the shards it keeps for now and those it gives back now: the
// highest first, none of busy (nil: all are busy). Of the kept shards, the
// highest it still holds beyond target are leaving: claims leave them out
// until a claim with none of them in flight gives them back. kept stays
// sorted.
func givingBack(owned []int16, target int, busy *[Shards]bool) (kept, surplus, leaving []int16) {
	n := len(owned) - target
	kept = slices.Clone(owned)
	if busy != nil {
		for i := len(kept) - 1; i >= 0 && len(surplus) < n; i-- {
			if !busy[kept[i]] {
				surplus = append(surplus, kept[i])
				kept = slices.Delete(kept, i, i+1)
			}
		}
		slices.Reverse(surplus)
	}
	if extra := len(kept) - target; extra > 0 {
		leaving = kept[len(kept)-extra:]
	}
	return kept, surplus, leaving
}

// scanShards reads a column of shard numbers, sorted.
func scanShards(rows Rows, err error) ([]int16, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int16
	for rows.Next() {
		var sh int16
		if err := rows.Scan(&sh); err != nil {
			return nil, err
		}
		out = append(out, sh)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// scanHolders reads rows of an owner and how many shards it holds.
func scanHolders(rows Rows, err error) (map[string]int, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var owner string
		var n int
		if err := rows.Scan(&owner, &n); err != nil {
			return nil, err
		}
		out[owner] = n
	}
	return out, rows.Err()
}

// shardList is a comma-separated list of shards, safe to splice into SQL.
func shardList(shards []int16) string {
	parts := make([]string, len(shards))
	for i, sh := range shards {
		parts[i] = strconv.Itoa(int(sh))
	}
	return strings.Join(parts, ", ")
}

// Release implements [relay.Releaser]: it gives back owner's shards and
// unregisters it, so other relays take its share over at their next renewal
// (a standby: at its next look, within 250ms).
func (s *Store) Release(ctx context.Context, owner string) error {
	s.mu.Lock()
	o := s.owners[owner]
	delete(s.owners, owner)
	s.mu.Unlock()
	waiting := false
	if o != nil {
		o.claimMu.Lock()
		defer o.claimMu.Unlock()
		o.mu.Lock()
		o.released = true
		done := o.renewing
		lock := o.lock
		o.lock = nil
		o.mu.Unlock()
		// The session lock ends after the leases: others that see it
		// free find nothing left to take over.
		defer s.unlock(owner, o, lock)
		if done != nil {
			select {
			case <-done:
			case <-ctx.Done():
				return fmt.Errorf("sqlstore: release leases: waiting for the renewal in progress: %w", ctx.Err())
			}
		}
		o.mu.Lock()
		o.shards, o.claimable, o.validUntil, o.last = nil, nil, time.Time{}, nil
		waiting = o.waiting
		o.endBatches()
		o.mu.Unlock()
	}
	// The request ends before the leases do: a standby that takes them
	// over and waits makes its own, which this must not cancel. A failure
	// (the register is missing, or not writable) does not keep the
	// leases: the request lapses by itself within LeaseTTL.
	if cancel := s.wake.cancel; cancel != "" && waiting {
		_, _ = s.db.ExecContext(ctx, cancel)
	}
	if err := s.lease.release(ctx, s.db, owner, nil); err != nil {
		return fmt.Errorf("sqlstore: release leases: %w", err)
	}
	if err := s.lease.unregister(ctx, s.db, owner); err != nil {
		return fmt.Errorf("sqlstore: release leases: %w", err)
	}
	return nil
}

// HandOver implements [relay.HandOverer]: when another relay is alive (it
// renewed its registration within LeaseTTL), it gives owner's shards back
// and unregisters it, as [Store.Release] does, and reports true; the other
// relays take the shards over at their next renewal (a standby: within
// 250ms). With no other relay alive it changes nothing and reports false.
// A later claim by owner registers it again, as a relay that joins: beside
// an active relay, it then stands by (see StoreConfig.MaxActiveRelays).
func (s *Store) HandOver(ctx context.Context, owner string) (bool, error) {
	n, err := s.lease.othersAlive(ctx, s.db, owner, time.Now())
	if err != nil {
		return false, fmt.Errorf("sqlstore: hand over: count the relays alive: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	if err := s.Release(ctx, owner); err != nil {
		return false, err
	}
	return true, nil
}

// OthersAlive implements [relay.PeerCounter]: it returns how many relays
// other than owner renewed their registration within LeaseTTL, the relays
// [Store.HandOver] would hand owner's shards to.
func (s *Store) OthersAlive(ctx context.Context, owner string) (int, error) {
	n, err := s.lease.othersAlive(ctx, s.db, owner, time.Now())
	if err != nil {
		return 0, fmt.Errorf("sqlstore: count the relays alive: %w", err)
	}
	return n, nil
}

// minTakeEvery, minTakeTries and maxTakeEvery set how soon an owner short
// of its share renews again (see ownerLease.takeEvery). A relay gives
// shards back within a batch or two (tens of milliseconds) of seeing
// another alive, so one that starts beside a busy one looks every 5 ms
// for the first 100 ms and takes its share within about that; then the
// renewals back off (the holder died, say, and its leases must expire
// first).
const (
	minTakeEvery = 5 * time.Millisecond
	minTakeTries = 20
	maxTakeEvery = 250 * time.Millisecond
)
