package sqlstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// delayedPingConn is a lock's connection whose pings are all answered,
// each after delay (or fail when their context ends first).
type delayedPingConn struct {
	Conn      // nil: only PingContext and Discard are called
	delay     time.Duration
	discarded atomic.Bool
}

func (c *delayedPingConn) PingContext(ctx context.Context) error {
	select {
	case <-time.After(c.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *delayedPingConn) Discard() { c.discarded.Store(true) }

// watchedLock starts the check of a lock just taken on conn by owner o,
// whose batches so far report their loss on the returned channel.
func watchedLock(t *testing.T, conn Conn) (*Store, *ownerLease, *ownerLock, chan struct{}) {
	t.Helper()
	s := &Store{}
	lost := make(chan struct{})
	o := &ownerLease{lost: lost, shards: []int16{1, 2}}
	l := &ownerLock{conn: conn, stop: make(chan struct{}), done: make(chan struct{}), held: &s.lockConns,
		shownUntil: time.Now().Add(lockAliveFor)}
	s.lockConns.Store(1)
	o.lock = l
	go s.watchLock(o, l)
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			close(l.stop)
			<-l.done
		}
	})
	return s, o, l, lost
}

// TestLateLockCheckEndsTheBatches: every ping is answered, but 450 ms after
// it was sent, within its own 500-ms deadline. An answer shows the session
// alive when its ping was sent, not when the answer came: a session that
// ended just after answering the first ping could be taken over by another
// relay lockGrace (750 ms) after that, while the second ping, sent when the
// first answer came (450 ms), is answered only 900 ms after the first ping.
// The owner's batches must end before that (they went on being published
// until the lock was found gone: never, here), claims must wait, and the
// lock and the shards must be kept, since the session lives on.
func TestLateLockCheckEndsTheBatches(t *testing.T) {
	conn := &delayedPingConn{delay: 450 * time.Millisecond}
	_, o, l, lost := watchedLock(t, conn)
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the owner's batches were still not lost after 5s of pings each answered 450 ms after it was sent")
	}
	o.mu.Lock()
	if o.lock != l || o.relock || len(o.shards) != 2 || conn.discarded.Load() {
		t.Errorf("after the batches ended: lock %p (want %p), relock %v, shards %v, connection discarded %v; want the lock and shards kept",
			o.lock, l, o.relock, o.shards, conn.discarded.Load())
	}
	o.mu.Unlock()
	// The next answer lets claims go on.
	waitClaimsGoOn(t, o, l, "after the batches ended, though every ping is answered")
}

// waitClaimsGoOn polls the claims' own test until claims no longer wait for
// o's lock l, and fails t after 5 s.
func waitClaimsGoOn(t *testing.T, o *ownerLease, l *ownerLock, why string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		o.mu.Lock()
		suspended := l.suspended(o, time.Now())
		o.mu.Unlock()
		if !suspended {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("claims still wait 5s " + why)
		}
		time.Sleep(10 * time.Millisecond) // a poll, not a synchronisation
	}
}

// TestPausedOwnerKeepsItsLock: an owner whose process was paused (its
// check's timer fires late, past lockAliveFor) ends its batches once,
// waits, and claims again once a check is answered, holding the same lock
// throughout: its session, and its lock, lived on. (A check that gave the
// lock up here would have the owner's shards given back and taken over at
// once while its abandoned writes may still be on their way.)
func TestPausedOwnerKeepsItsLock(t *testing.T) {
	conn := &delayedPingConn{delay: time.Millisecond}
	_, o, l, lost := watchedLock(t, conn)
	o.mu.Lock()
	l.shownUntil = time.Now().Add(-time.Second) // the last answer is 1.7 s old
	if !l.suspended(o, time.Now()) {
		t.Fatal("claims do not wait though no check was answered for lockAliveFor")
	}
	next := o.lost
	o.mu.Unlock()
	select {
	case <-lost:
	default:
		t.Fatal("the batches claimed before the pause were not ended")
	}
	waitClaimsGoOn(t, o, l, "after the pause, though every ping is answered in 1 ms")
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-next:
		t.Error("the batches claimed after the pause were ended too: a late lock ends its batches once")
	default:
	}
	if o.lock != l || o.relock || conn.discarded.Load() {
		t.Errorf("lock %p (want %p), relock %v, discarded %v: the pause cost the owner its lock", o.lock, l, o.relock, conn.discarded.Load())
	}
}

// TestPromptLockChecksKeepTheBatches: pings answered at once never end the
// owner's batches (the lateness above is not simply a shorter timeout).
func TestPromptLockChecksKeepTheBatches(t *testing.T) {
	conn := &delayedPingConn{delay: time.Millisecond}
	_, o, l, lost := watchedLock(t, conn)
	select {
	case <-lost:
		t.Fatal("pings answered in 1 ms ended the owner's batches")
	case <-l.done:
		t.Fatal("pings answered in 1 ms ended the lock's check")
	case <-time.After(2 * lockAliveFor): // three checks and more
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != l || l.late || conn.discarded.Load() {
		t.Errorf("lock %p (want %p), late %v, discarded %v", o.lock, l, l.late, conn.discarded.Load())
	}
}

// TestFailedLockCheckGivesTheLockUp: a ping that fails (the session ended,
// the connection broke) gives the lock up, as before: the batches end, the
// shards are dropped, and the next renewal takes a lock again.
func TestFailedLockCheckGivesTheLockUp(t *testing.T) {
	conn := &delayedPingConn{delay: time.Hour} // each ping times out
	s, o, l, lost := watchedLock(t, conn)
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's check went on for 5s though no ping was answered")
	}
	select {
	case <-lost:
	default:
		t.Error("the batches were not ended")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != nil || !o.relock || len(o.shards) != 0 || !conn.discarded.Load() || s.lockConns.Load() != 0 {
		t.Errorf("lock %v, relock %v, shards %v, discarded %v, lock connections %d; want none, relock, none, discarded, 0",
			o.lock, o.relock, o.shards, conn.discarded.Load(), s.lockConns.Load())
	}
}
