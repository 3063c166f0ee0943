package publishing

import "sync"

// Gate is what a publisher's Publish and Close share: Publish calls run
// together, Close waits for the calls in flight before it releases what
// they use (a connection, a client), and a call after Close fails with the
// publisher's closed error. The zero value is open.
type Gate struct {
	mu     sync.RWMutex
	closed bool
}

// Publish runs publish, one Publish call, unless the gate is closed (it
// then returns closedErr), and returns its error with the failures
// transient reports true for marked as transient (see [Classify]). Close
// waits for it to return.
func (g *Gate) Publish(closedErr error, transient func(error) bool, publish func() error) (err error) {
	defer func() { err = Classify(err, transient) }()
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return closedErr
	}
	return publish()
}

// Close closes the gate once the Publish calls in flight have returned,
// and then runs release, if not nil, and returns its error. Only the
// first Close runs release; the others return nil.
func (g *Gate) Close(release func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if release == nil {
		return nil
	}
	return release()
}
