package sqlstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// latePingConn is a lock's connection whose pings are all answered, each
// after delay (or fail when their context ends first).
type latePingConn struct {
	Conn      // nil: only PingContext and Discard are called
	delay     time.Duration
	discarded atomic.Bool
}

func (c *latePingConn) PingContext(ctx context.Context) error {
	select {
	case <-time.After(c.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *latePingConn) Discard() { c.discarded.Store(true) }

// watchedLock starts the check of an owner's lock just taken on a
// connection whose pings are answered after delay; held is the store's
// count of lock connections (1, the lock's).
func watchedLock(delay time.Duration) (o *ownerLease, l *ownerLock, conn *latePingConn, held *atomic.Int32) {
	conn = &latePingConn{delay: delay}
	held = new(atomic.Int32)
	held.Store(1)
	l = &ownerLock{conn: conn, alive: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), held: held}
	o = &ownerLease{lock: l}
	go (&Store{}).watchLock(o, l)
	return o, l, conn, held
}

// TestLockCheckCountsFromTheLastAnsweredCheck: the lock's check must be
// answered within lockCheckEvery + lockPingTimeout of the start of the last
// check answered, not within lockPingTimeout of its own start. Pings that
// each take 450 ms all pass a 500-ms deadline of their own, while the time
// the session was last known alive falls ever further behind: the second
// check starts 650 ms after the first one's start (its answer took 450 ms),
// so a session that ended just after answering the first could be taken
// over by another relay (lockGrace, 750 ms, after it ended) before an
// answer to the second, due 1,100 ms after the first's start, showed it.
// The owner must give its leases up instead.
func TestLockCheckCountsFromTheLastAnsweredCheck(t *testing.T) {
	o, l, conn, held := watchedLock(450 * time.Millisecond)
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		close(l.stop)
		<-l.done
		t.Fatal("the lock's check kept the lock for 5s while each answer came 450 ms after its ping")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != nil || !o.relock {
		t.Errorf("after the check gave up: lock %v, relock %v; want no lock, relock", o.lock, o.relock)
	}
	if !conn.discarded.Load() || held.Load() != 0 {
		t.Errorf("the lock's connection: discarded %v, lock connections counted %d; want discarded, 0", conn.discarded.Load(), held.Load())
	}
}

// TestLockCheckKeepsAPromptlyAnsweredLock: pings answered at once keep the
// lock (the check above is not simply a shorter timeout).
func TestLockCheckKeepsAPromptlyAnsweredLock(t *testing.T) {
	o, l, conn, _ := watchedLock(time.Millisecond)
	// Five checks' worth: the lock must still be held.
	select {
	case <-l.done:
		t.Fatal("the lock's check gave up a lock whose pings are answered in 1 ms")
	case <-time.After(5 * lockCheckEvery):
	}
	close(l.stop)
	<-l.done
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != l || conn.discarded.Load() {
		t.Errorf("lock %p (want %p), discarded %v: the check ended the lock", o.lock, l, conn.discarded.Load())
	}
}
