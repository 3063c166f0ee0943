package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The session lock (PostgreSQL, MySQL/MariaDB): while a relay owner runs,
// its store holds a session-level lock named after the owner on a
// connection of its own, taken before the owner first registers. The
// database releases it when the session ends, so the other relays see a
// relay whose process died (killed, crashed, its host gone) without
// waiting for its leases to expire:
//
//   - PostgreSQL: pg_try_advisory_lock(k), k the bigint
//     ('x' || substr(md5(concat_ws(chr(31), current_schema(), table, owner)), 1, 16))::bit(64)::bigint,
//     seen by others in pg_locks (advisory, objsubid 1).
//   - MySQL/MariaDB: GET_LOCK(n, 0), n
//     CONCAT('outbox:', MD5(CONCAT_WS(CHAR(0), DATABASE(), table, owner))),
//     seen by others with IS_USED_LOCK(n).
//
// Each store looks at the locks of the other owners registered alive or
// holding leases (a standby at each look, every 250 ms; every relay in its
// renewals). An owner whose lock it has seen held, or that registered as
// holding one (the relays table's session_lock, set at each registration
// of an owner that holds its lock: so a relay started after another died,
// a restart, knows it), and whose lock it then finds free twice, lockGrace
// apart, is dead to it: in its lease transaction it gives that owner's
// shards back and unregisters it, and takes its share as from a relay that
// released its leases. An owner that holds no lock (a relay of an earlier
// version, LeaseExpiryOnly, a pool too small) registers session_lock
// false and is taken over only when its leases expire, as is a relay that
// is paused or cut off from the database: its session, and its lock, live
// on.
//
// The owner checks its lock's connection every lockCheckEvery, with a
// deadline of lockPingTimeout: when a check fails (the server ended the
// session, the connection broke) it considers its leases lost at once
// (the batches it claimed report it, relay.Batch.Lost), gives its rows back
// at its next renewal and takes a lock again.
//
// A check that is answered shows the session alive when it started, not
// when its answer came: an answer can come late (the network or the
// process was slow, or the process was paused), and the session may have
// ended just after the server sent it. So the owner counts its lock as
// shown held for lockAliveFor from the start of the last check answered
// (from the start of the lock's taking, at first). When that time passes
// before another check is answered, the lock is late: the batches claimed
// so far are lost, and claims return nothing, until a check is answered;
// the lock and the shards are kept (a paused process's session, and its
// lock, live on, and nobody takes its shards before its leases expire).
// lockAliveFor is shorter than lockGrace, so a relay whose session ended
// while its process lives has stopped publishing before another takes its
// shards, however late its last answer came.
const (
	lockCheckEvery  = 200 * time.Millisecond
	lockPingTimeout = 500 * time.Millisecond
	lockGrace       = 750 * time.Millisecond
	lockAliveFor    = lockCheckEvery + lockPingTimeout

	// minLockPool is the smallest bound on the pool's open connections
	// (sql.DB.SetMaxOpenConns, pgxpool's MaxConns) with which a store
	// holds a session lock: the lock's connection, the relay's wake-up
	// listener (PostgreSQL) and one for its statements, plus one for each
	// lock the store holds already (for other owners). With a tighter
	// bound the lock would starve the claims, so the store falls back to
	// lease expiry.
	minLockPool = 3
)

// sessionLocker is implemented by the dialects whose databases hold locks
// for as long as a session lives.
type sessionLocker interface {
	// lockSession takes owner's session lock on conn without waiting
	// (false when another session holds it), and returns conn's session
	// id.
	lockSession(ctx context.Context, conn Conn, t storeTables, owner string) (bool, int64, error)
	// unlockSession releases owner's session lock held by conn's
	// session: closing the connection would release it only once the
	// server has ended the session, which it does after the client has
	// gone, so that a relay run again at once in the same process could
	// find its own lock still held.
	unlockSession(ctx context.Context, conn Conn, t storeTables, owner string) error
	// endSession ends session id (a session of this store's that held
	// owner's lock, and that the store lost track of: its connection
	// turned half-open, say), if it still holds owner's lock.
	endSession(ctx context.Context, q Executor, t storeTables, owner string, id int64) error
	// lockStates reports, for each owner other than owner registered
	// alive or holding an unexpired lease, whether some session holds its
	// lock, and whether it registered as holding one. It takes no lock.
	lockStates(ctx context.Context, q Executor, t storeTables, owner string) (map[string]lockState, error)
}

// lockState is what lockStates reports of an owner.
type lockState struct {
	// held: some session holds the owner's lock.
	held bool
	// registered: the owner registered as holding its lock (the relays
	// table's session_lock), so that a relay that never saw the lock held
	// (it started after the owner died) may take it over too.
	registered bool
}

// ownerLock is an owner's session lock: the connection that holds it, and
// the check that watches it.
type ownerLock struct {
	conn    Conn
	session int64         // the database's id of the session
	stop    chan struct{} // closed to end the check
	done    chan struct{} // closed when the check has ended
	held    *atomic.Int32 // the store's count of lock connections
	once    sync.Once

	// shownUntil is until when the lock's last answered check shows it
	// held: lockAliveFor after that check's start (on the monotonic
	// clock). late is set once that time has passed, and the owner's
	// batches were ended, until a check is answered again. Both are
	// guarded by the owner's mu.
	shownUntil time.Time
	late       bool
	// unanswered has the check's answers go uncounted, as in a process
	// paused before they came (tests only: testhooks.Sqlstore.LateLock).
	unanswered bool
}

// suspended reports whether claims must wait for the lock's next answered
// check (see lockAliveFor), and, the first time, ends o's batches. The
// caller holds o.mu.
func (l *ownerLock) suspended(o *ownerLease, now time.Time) bool {
	if l == nil || now.Before(l.shownUntil) {
		return false
	}
	if !l.late {
		l.late = true
		o.endBatches()
	}
	return true
}

// discard ends the lock's session, once.
func (l *ownerLock) discard() {
	l.once.Do(func() {
		l.conn.Discard()
		l.held.Add(-1)
	})
}

// lockOwner takes owner's session lock on a connection of its own, when
// the dialect has one and it is on, unless o holds it already, and starts
// its check. The caller holds o.claimMu or runs the owner's only renewal.
func (s *Store) lockOwner(ctx context.Context, owner string, o *ownerLease) (*ownerLock, error) {
	sl, ok := s.dialect.(sessionLocker)
	if !ok || s.cfg.LeaseExpiryOnly {
		return nil, nil
	}
	o.mu.Lock()
	l := o.lock
	o.mu.Unlock()
	if l != nil {
		return l, nil
	}
	// The lock's connection is counted from now, so that owners locking
	// at once do not take the pool's last connections between them.
	if n := int(s.lockConns.Add(1)); s.db.MaxConns() > 0 && n-1+minLockPool > s.db.MaxConns() {
		s.lockConns.Add(-1)
		return nil, nil
	}
	conn, err := s.conn(ctx)
	if err != nil {
		s.lockConns.Add(-1)
		return nil, fmt.Errorf("sqlstore: lease: session lock: connect: %w", err)
	}
	taking := time.Now()
	got, session, err := sl.lockSession(ctx, conn, s.tables, owner)
	o.mu.Lock()
	ghost := o.ghost
	o.mu.Unlock()
	for try := 0; err == nil && !got && ghost != 0 && try < 20; try++ {
		// The session of the owner's last lock, which its check gave up
		// on (its connection turned half-open, say), may live on in the
		// server, and hold the lock: end it, and take the lock again.
		if try == 0 {
			if err = sl.endSession(ctx, conn, s.tables, owner, ghost); err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(50 * time.Millisecond): // the session ends
			taking = time.Now()
			got, session, err = sl.lockSession(ctx, conn, s.tables, owner)
		}
	}
	if err != nil || !got {
		conn.Discard()
		s.lockConns.Add(-1)
		if err == nil {
			err = fmt.Errorf("another session holds relay %q's lock (an earlier session of this process, not yet ended by the server?)", owner)
		}
		return nil, fmt.Errorf("sqlstore: lease: session lock: %w", err)
	}
	l = &ownerLock{conn: conn, session: session, stop: make(chan struct{}), done: make(chan struct{}), held: &s.lockConns,
		shownUntil: taking.Add(lockAliveFor)}
	o.mu.Lock()
	o.ghost = 0
	if o.released {
		o.mu.Unlock()
		l.discard()
		return nil, errors.New("sqlstore: lease: released")
	}
	o.lock = l
	o.mu.Unlock()
	go s.watchLock(o, l)
	return l, nil
}

// watchLock pings l's connection every lockCheckEvery, with a deadline of
// lockPingTimeout, until l.stop is closed; when a ping fails, the owner
// has lost its leases (see lockLost). When no ping is answered within
// lockAliveFor of the start of the last one answered, the owner's batches
// end at that moment, not at the next answer or failure (see lockLate).
func (s *Store) watchLock(o *ownerLease, l *ownerLock) {
	defer close(l.done)
	o.mu.Lock()
	until := l.shownUntil
	o.mu.Unlock()
	late := time.AfterFunc(time.Until(until), func() { s.lockLate(o, l) })
	defer late.Stop()
	t := time.NewTicker(lockCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), lockPingTimeout)
		err := l.conn.PingContext(ctx)
		cancel()
		if err == nil {
			late.Reset(time.Until(s.lockShown(o, l, start.Add(lockAliveFor))))
			continue
		}
		select {
		case <-l.stop:
			return // closed while it pinged
		default:
		}
		s.lockLost(o, l)
		l.discard()
		return
	}
}

// lockShown records that a check of o's lock l was answered: the lock is
// shown held until until (if that is later than it was), and claims go on.
// It returns when the lock is shown held until.
func (s *Store) lockShown(o *ownerLease, l *ownerLock, until time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l.unanswered {
		return l.shownUntil
	}
	if until.After(l.shownUntil) {
		l.shownUntil = until
	}
	if time.Now().Before(l.shownUntil) {
		l.late = false
	}
	return l.shownUntil
}

// lockLate ends o's batches when no check of its lock l was answered
// within lockAliveFor of the start of the last one answered: its session
// may have ended since, and other relays may take its shards lockGrace
// after that. (The timer that calls it may fire after a check was
// answered, and its time moved on: then it does nothing.)
func (s *Store) lockLate(o *ownerLease, l *ownerLock) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock == l {
		l.suspended(o, time.Now())
	}
}

// lockLost records that o's session lock l ended: o holds no shard from
// now on, the batches it claimed are lost, and its next renewal gives its
// rows back and takes a lock again.
func (s *Store) lockLost(o *ownerLease, l *ownerLock) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != l {
		return
	}
	o.lock = nil
	o.ghost = l.session
	if len(o.shards) > 0 {
		o.loss = &leaseLoss{reason: LossSessionEnded, shards: len(o.shards)}
	}
	o.dropShards()
	o.relock = true
	if o.cancelRenew != nil {
		o.cancelRenew() // its outcome is dropped anyway (see renew)
	}
}

// dropShards forgets o's shards and ends its batches (relay.Batch.Lost).
// The caller holds o.mu.
func (o *ownerLease) dropShards() {
	o.shards, o.claimable, o.validUntil, o.last = nil, nil, time.Time{}, nil
	o.nextRenew = time.Time{}
	o.endBatches()
}

// endBatches closes the channel of o's batches claimed so far
// (relay.Batch.Lost); later batches get a new one. The caller holds o.mu.
func (o *ownerLease) endBatches() {
	if o.lost != nil {
		close(o.lost)
	}
	o.lost = make(chan struct{})
}

// unlock stops l's check and ends its session, which releases the lock.
func (s *Store) unlock(owner string, o *ownerLease, l *ownerLock) {
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), connPingTimeout)
	err := s.dialect.(sessionLocker).unlockSession(ctx, l.conn, s.tables, owner)
	cancel()
	l.discard()
	if err != nil {
		// The session may hold the lock until the server ends it: the
		// owner's next lock ends it if it still does.
		o.mu.Lock()
		if o.ghost == 0 {
			o.ghost = l.session
		}
		o.mu.Unlock()
	}
}

// Reasons a relay lost shards it held without giving them back, as
// [Store.LeaseLost] reports them.
const (
	// LossExpired: the owner's lease expired before it renewed it (the
	// relay was paused, or cut off from the database, for longer than
	// LeaseTTL), and other relays took the shards over.
	LossExpired = "lease expired before its renewal (the relay was paused or cut off from the database)"
	// LossSessionEnded: the database session that held the owner's
	// session lock ended (the server killed it, or the connection broke);
	// the other relays take the owner for dead.
	LossSessionEnded = "database session holding the relay's lock ended"
	// LossTakenOver: other relays took the shards while the lease had not
	// expired: they found the owner's session lock free.
	LossTakenOver = "taken over by another relay, which found this relay's session lock free"
)

// leaseLoss is a loss of shards not yet reported by LeaseLost.
type leaseLoss struct {
	reason string
	late   time.Duration
	shards int
}

// lookAtLocks reads the lock states of the other owners and updates the
// store's view of them (see sessionLocker): it returns the owners dead to
// it (seen held, then free since at least lockGrace ago), and the time at
// which an owner seen free now will be, if it stays so (zero when none).
func (s *Store) lookAtLocks(ctx context.Context, q Executor, owner string, now time.Time) (dead []string, due time.Time, err error) {
	sl, ok := s.dialect.(sessionLocker)
	if !ok || s.cfg.LeaseExpiryOnly {
		return nil, time.Time{}, nil
	}
	states, err := sl.lockStates(ctx, q, s.tables, owner)
	if err != nil {
		return nil, time.Time{}, err
	}
	s.locksMu.Lock()
	defer s.locksMu.Unlock()
	for o, st := range states {
		switch {
		case st.held:
			s.seenLocked[o] = time.Time{}
		default:
			since, seen := s.seenLocked[o]
			if !seen && st.registered {
				// Registered as holding its lock, which is free: it
				// died before this store looked (a relay restarted after
				// a crash). As if seen held.
				since, seen = time.Time{}, true
			}
			if !seen {
				continue // never seen held: lease expiry only
			}
			if since.IsZero() {
				s.seenLocked[o] = now
				if d := now.Add(lockGrace); due.IsZero() || d.Before(due) {
					due = d
				}
				continue
			}
			if now.Sub(since) >= lockGrace {
				dead = append(dead, o)
			} else if d := since.Add(lockGrace); due.IsZero() || d.Before(due) {
				due = d
			}
		}
	}
	for o := range s.seenLocked {
		if _, ok := states[o]; !ok {
			delete(s.seenLocked, o) // gone: released, or taken over
		}
	}
	return dead, due, nil
}

// LeaseLost reports, once, why owner (a relay's [relay.ClaimRequest.Owner])
// last lost shards it held without giving them back: the reason (one of
// LossExpired, LossSessionEnded, LossTakenOver), how long after its
// lease's end its renewal came (zero unless the lease expired), and how
// many shards it held. ok is false when it lost none since the last call.
// A rebalance, a hand-over or a release gives shards back, and is no loss.
// The relay logs a loss at WARN ("relay: lease lost").
func (s *Store) LeaseLost(owner string) (reason string, late time.Duration, ok bool) {
	s.mu.Lock()
	o := s.owners[owner]
	s.mu.Unlock()
	if o == nil {
		return "", 0, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.loss
	if l == nil {
		return "", 0, false
	}
	o.loss = nil
	return l.reason, l.late, true
}

// scanLockStates reads rows of an owner, whether its lock is held and
// whether it registered as holding it.
func scanLockStates(rows Rows, err error) (map[string]lockState, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]lockState{}
	for rows.Next() {
		var owner string
		var st lockState
		if err := rows.Scan(&owner, &st.held, &st.registered); err != nil {
			return nil, err
		}
		out[owner] = st
	}
	return out, rows.Err()
}
