// Package fence keeps a publisher's writes to its broker within the
// publish calls they belong to: a [Gate] lets the bytes of a publish reach
// the network only before the deadline of the calls made through it, and,
// once it is closed (a call was abandoned), never again.
//
// A broker client may go on writing after the call that asked for the
// write has returned: kafka-go sends the batches of a WriteMessages call
// whose context ended from goroutines of its own; amqp091 writes the
// frames of a publish that a paused process resumes. A relay paused in the
// middle of a publish and woken after its lease expired would have those
// writes land after its successor's writes of the same aggregates. The
// gate closes that hole where it starts, at the connection, the only place
// every write passes through: it follows the protocol's frames (a
// [Classifier] tells where each one ends and whether it publishes), asks
// before it writes any byte of a publishing frame, and refuses it with
// [ErrFenced] once the deadline has passed, aborting the connection so
// that the broker never receives the frame whole. Closing the gate aborts
// every connection it let through (SO_LINGER 0, which also drops what the
// kernel still held to send) and refuses new ones.
//
// It is internal to package adapters and makes no compatibility promise.
package fence

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrFenced is what a fenced connection returns for a publishing frame it
// refuses to write: the publish call the frame belongs to has ended (its
// messages' context was cancelled or passed its deadline), so the relay
// that made it may have lost its lease, and another relay may already be
// publishing the same aggregates.
var ErrFenced = errors.New("write refused: the publish it belongs to has ended (fenced)")

// Classifier reads the header of the frame that starts b, the bytes a
// client writes on a connection: it returns the frame's whole length in
// bytes and whether it publishes, or ok false when b is too short to tell.
type Classifier func(b []byte) (length int, publishes bool, ok bool)

// maxHeader is the most bytes a Classifier is given.
const maxHeader = 16

// Gate fences the publishing frames written on the connections of one
// client (see the package doc). It is safe for concurrent use.
type Gate struct {
	classify Classifier

	mu sync.Mutex
	// until is the latest deadline of the calls begun: publishing frames
	// may be written before it.
	until time.Time
	// unbounded counts calls in flight without a deadline: while there
	// are some, publishing frames may be written at any time.
	unbounded int
	closed    bool
	conns     map[*conn]struct{}
	// calls counts the calls in flight by context.
	calls map[context.Context]int
	now   func() time.Time
}

// NewGate returns an open gate for a protocol whose frames classify reads.
func NewGate(classify Classifier) *Gate {
	return &Gate{classify: classify, conns: map[*conn]struct{}{}, calls: map[context.Context]int{}, now: time.Now}
}

// Begin records a publish call made under ctx, whose deadline (none: no
// limit) bounds its writes, and returns the function that records its
// end.
func (g *Gate) Begin(ctx context.Context) (end func()) {
	deadline, bounded := ctx.Deadline()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[ctx]++
	if !bounded {
		g.unbounded++
	} else if deadline.After(g.until) {
		g.until = deadline
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.calls[ctx]--; g.calls[ctx] == 0 {
				delete(g.calls, ctx)
			}
			if !bounded {
				g.unbounded--
			}
		})
	}
}

// Abandoned reports whether a call in flight has had its context end: its
// caller may have gone on (the relay stops waiting for a Publish at its
// deadline), while the client may still hold the call's writes. Close the
// gate before the next call uses its connections.
func (g *Gate) Abandoned() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for ctx := range g.calls {
		if ctx.Err() != nil {
			return true
		}
	}
	return false
}

// Closed reports whether the gate was closed.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// writeDeadline returns the deadline a publishing frame's bytes must be
// written by, or ErrFenced when that has passed or the gate is closed. The
// zero time means no deadline.
func (g *Gate) writeDeadline() (time.Time, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return time.Time{}, ErrFenced
	case g.unbounded > 0:
		return time.Time{}, nil
	case !g.now().Before(g.until):
		return time.Time{}, ErrFenced
	}
	return g.until, nil
}

// Close closes the gate: every connection it let through is aborted, and
// it lets no new one through.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	conns := g.conns
	g.conns = map[*conn]struct{}{}
	g.mu.Unlock()
	for c := range conns {
		c.abort()
	}
}

// Wrap returns c fenced by the gate. Below it is raw, the TCP connection
// that abort closes (c itself when nil): c may be a TLS connection over it,
// since the gate must see the protocol's frames in the clear. It returns
// ErrFenced, closing raw, when the gate is closed.
func (g *Gate) Wrap(c, raw net.Conn) (net.Conn, error) {
	if raw == nil {
		raw = c
	}
	fc := &conn{Conn: c, raw: raw, gate: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		fc.abort()
		return nil, ErrFenced
	}
	g.conns[fc] = struct{}{}
	return fc, nil
}

// SetClock replaces the gate's clock (tests).
func (g *Gate) SetClock(now func() time.Time) {
	g.mu.Lock()
	g.now = now
	g.mu.Unlock()
}

// conn is a connection of a gate. It follows the frames written on it and
// asks the gate before it writes any byte of a publishing frame.
type conn struct {
	net.Conn
	raw  net.Conn // below TLS, to abort
	gate *Gate

	mu sync.Mutex // serializes writes and guards the fields below
	f  frames
	// writeBy is the write deadline the client set (zero: none).
	writeBy time.Time

	aborted atomic.Bool
}

// frames follows the frames of a byte stream.
type frames struct {
	// left is how many bytes of the current frame remain; publishes says
	// whether it is a publishing frame; hdr holds the first bytes of a
	// frame not classified yet.
	left      int
	publishes bool
	hdr       []byte
}

// feed follows the frames through b and reports whether b holds bytes of
// a publishing frame, or of a frame whose kind b does not tell yet.
func (f *frames) feed(b []byte, classify Classifier) (publishes bool) {
	for len(b) > 0 {
		if f.left > 0 {
			n := min(f.left, len(b))
			publishes = publishes || f.publishes
			f.left -= n
			b = b[n:]
			continue
		}
		take := min(len(b), maxHeader-len(f.hdr))
		h := append(slices.Clip(f.hdr), b[:take]...)
		length, pub, ok := classify(h)
		if !ok {
			if take < len(b) {
				// A classifier that cannot tell from maxHeader bytes:
				// treat the rest as publishing.
				f.left, f.publishes, f.hdr = 1<<62, true, nil
				return true
			}
			f.hdr = h
			return true
		}
		fromB := max(0, min(take, length-len(f.hdr)))
		f.publishes = pub
		publishes = publishes || pub
		f.left = length - len(f.hdr) - fromB
		f.hdr = nil
		b = b[fromB:]
	}
	return publishes
}

// Write writes b, refusing with [ErrFenced] (and aborting the connection,
// and closing the gate) when b holds bytes of a publishing frame the gate
// does not let through.
func (c *conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted.Load() {
		return 0, ErrFenced
	}
	probe := c.f
	probe.hdr = slices.Clone(c.f.hdr)
	if probe.feed(b, c.gate.classify) {
		by, err := c.gate.writeDeadline()
		if err != nil {
			// The client fell behind the calls it writes for: what it
			// holds for the gate's other connections is as late. Close
			// the gate, so that its owner sees it (Closed) and publishes
			// on new connections.
			c.abort()
			c.gate.Close()
			return 0, err
		}
		// The deadline goes on the socket too, so that a write blocked
		// on a full send window cannot complete after it.
		if !by.IsZero() && (c.writeBy.IsZero() || by.Before(c.writeBy)) {
			_ = c.Conn.SetWriteDeadline(by)
			defer func() { _ = c.Conn.SetWriteDeadline(c.writeBy) }()
		}
	}
	n, err := c.Conn.Write(b)
	c.f.feed(b[:n], c.gate.classify)
	return n, err
}

// SetDeadline records the write deadline the client sets, so that Write
// can put it back after a publishing frame's.
func (c *conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeBy = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline records the write deadline the client sets (see
// SetDeadline).
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeBy = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// Close aborts the connection (see abort), and leaves the gate. A client
// closes a connection when it is done with it, when every request it
// wrote was answered, or when it gave up on it (a request timed out); in
// the second case a graceful close would still have the kernel deliver
// what it holds of the connection, after its FIN: retransmitted after a
// network partition heals, say, long after the publish it belongs to
// ended. So no connection of a gate closes gracefully. (The correctness
// suite's netsplit saw it: kafka-go closed a connection a second after a
// produce request the split held, and the request landed at the heal.)
func (c *conn) Close() error {
	c.gate.mu.Lock()
	delete(c.gate.conns, c)
	c.gate.mu.Unlock()
	if c.aborted.Load() {
		return nil
	}
	c.abort()
	return nil
}

// abort closes the connection at once, discarding whatever the kernel
// still holds to send (SO_LINGER 0: the peer gets a reset). A write
// blocked on it returns.
func (c *conn) abort() {
	if c.aborted.Swap(true) {
		return
	}
	if tc, ok := c.raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.raw.Close()
}
