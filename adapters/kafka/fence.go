package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrFenced is what a connection of a [Publisher] returns for a produce
// request it refuses to write: the Publish call the request belongs to has
// ended (its messages' context was cancelled or passed its deadline), so
// the relay that made it may have lost its lease, and another relay may
// already be publishing the same aggregates. Publish wraps it when it is
// the reason a write failed.
var ErrFenced = errors.New("kafka: produce request refused: the publish it belongs to has ended (fenced)")

// apiKeyProduce is the Kafka protocol's request api_key of Produce.
const apiKeyProduce = 0

// gate fences the produce requests of one set of kafka-go Writers (see
// [Publisher]): it lets a produce request reach the network only before
// the deadline of the Publish calls made through the set, and, once a call
// has ended without its writes having ended, never again.
//
// kafka-go's Writer.WriteMessages returns when its context ends, but the
// per-partition batches it queued are still written afterwards, by
// goroutines of its own, on connections of its own. A relay paused in the
// middle of a publish (SIGSTOP, a long GC pause, a VM frozen) and woken after
// its lease expired would have those batches land after its successor's
// writes of the same aggregates. The gate closes that hole where it
// starts: at the connection, the only place every write passes through. A
// produce request written after the deadline is refused and its connection
// aborted, so the broker never receives it whole; and the set a call was
// abandoned on is retired at once: its connections are aborted (SO_LINGER
// 0, which also discards what the kernel still holds to send) and it takes
// no new one.
type gate struct {
	mu sync.Mutex
	// until is the latest deadline of the Publish calls made through the
	// set: produce requests may be written before it.
	until time.Time
	// unbounded counts calls in flight without a deadline: while there
	// are some, produce requests may be written at any time.
	unbounded int
	closed    bool
	conns     map[*fencedConn]struct{}
	// calls counts the Publish calls in flight by context.
	calls map[context.Context]int
	now   func() time.Time
}

func newGate() *gate {
	return &gate{conns: map[*fencedConn]struct{}{}, calls: map[context.Context]int{}, now: time.Now}
}

// begin records a Publish call made under ctx, whose deadline (none: no
// limit) bounds its produce requests, and returns the function that
// records its end.
func (g *gate) begin(ctx context.Context) (end func()) {
	deadline, bounded := ctx.Deadline()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[ctx]++
	if !bounded {
		g.unbounded++
	} else if deadline.After(g.until) {
		g.until = deadline
	}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.calls[ctx]--; g.calls[ctx] == 0 {
			delete(g.calls, ctx)
		}
		if !bounded {
			g.unbounded--
		}
	}
}

// abandoned reports whether a call in flight has had its context end: its
// caller may have gone on (the relay stops waiting for a Publish at its
// deadline), while kafka-go still holds the call's batches.
func (g *gate) abandoned() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for ctx := range g.calls {
		if ctx.Err() != nil {
			return true
		}
	}
	return false
}

// writeDeadline returns the deadline a produce request's bytes must be
// written by, or ErrFenced when that has passed or the gate is closed.
// The zero time means no deadline.
func (g *gate) writeDeadline() (time.Time, error) {
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

// close retires the gate: every connection it let through is aborted, and
// it lets no new one through.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	conns := g.conns
	g.conns = map[*fencedConn]struct{}{}
	g.mu.Unlock()
	for c := range conns {
		c.abort()
	}
}

// dialer wraps dial (nil: a net.Dialer's) so that its connections pass
// through g, with tlsConfig's TLS on top of the raw connection when not
// nil: the gate must see the protocol's frames, so it takes TLS over from
// kafka-go's Transport.
func (g *gate) dialer(dial func(context.Context, string, string) (net.Conn, error), tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	if dial == nil {
		d := &net.Dialer{Timeout: 3 * time.Second}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		if closed {
			return nil, ErrFenced
		}
		raw, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		conn := raw
		if tlsConfig != nil {
			cfg := tlsConfig
			if cfg.ServerName == "" {
				cfg = cfg.Clone()
				cfg.ServerName, _, _ = net.SplitHostPort(address)
			}
			tc := tls.Client(raw, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = raw.Close()
				return nil, fmt.Errorf("kafka: TLS handshake with %s: %w", address, err)
			}
			conn = tc
		}
		c := &fencedConn{Conn: conn, raw: raw, gate: g}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.closed {
			c.abort()
			return nil, ErrFenced
		}
		g.conns[c] = struct{}{}
		return c, nil
	}
}

// fencedConn is a connection of a gate. It follows the request frames
// written on it (a 4-byte size, then the request: a 2-byte api_key first)
// and asks the gate before it writes any byte of a produce request.
type fencedConn struct {
	net.Conn
	raw  net.Conn // below TLS, to abort
	gate *gate

	mu sync.Mutex // serializes writes and guards the fields below
	// left is how many bytes of the current frame remain to be written;
	// hdr holds the first bytes of a frame whose header is not complete
	// yet, and produce says whether the current frame is a produce
	// request.
	left    int
	hdr     []byte
	produce bool
	// writeBy is the write deadline kafka-go set (zero: none).
	writeBy time.Time

	aborted atomic.Bool
}

// Write writes b, refusing with [ErrFenced] (and aborting the connection)
// when b holds bytes of a produce request the gate does not let through.
func (c *fencedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted.Load() {
		return 0, ErrFenced
	}
	if c.carriesProduce(b) {
		by, err := c.gate.writeDeadline()
		if err != nil {
			c.abort()
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
	c.advance(b[:n])
	return n, err
}

// carriesProduce reports whether b, written next, holds bytes of a
// produce request: the frame in progress is one, or a frame starting in b
// is one. A frame whose api_key is not in b yet counts as one. The
// caller holds c.mu.
func (c *fencedConn) carriesProduce(b []byte) bool {
	left, hdr, produce := c.left, c.hdr, c.produce
	for len(b) > 0 {
		if left > 0 {
			if produce {
				return true
			}
			n := min(left, len(b))
			left -= n
			b = b[n:]
			continue
		}
		need := 6 - len(hdr)
		if len(b) < need {
			return true // the api_key is not known yet: ask
		}
		h := append(append([]byte(nil), hdr...), b[:need]...)
		size := int(int32(binary.BigEndian.Uint32(h)))
		if binary.BigEndian.Uint16(h[4:]) == apiKeyProduce {
			return true
		}
		hdr, produce = nil, false
		left = size - 2
		b = b[need:]
	}
	return false
}

// advance follows the frames through b, just written. The caller holds
// c.mu.
func (c *fencedConn) advance(b []byte) {
	for len(b) > 0 {
		if c.left > 0 {
			n := min(c.left, len(b))
			c.left -= n
			b = b[n:]
			continue
		}
		need := 6 - len(c.hdr)
		if len(b) < need {
			c.hdr = append(c.hdr, b...)
			return
		}
		h := append(c.hdr, b[:need]...)
		c.produce = binary.BigEndian.Uint16(h[4:]) == apiKeyProduce
		c.left = int(int32(binary.BigEndian.Uint32(h))) - 2
		c.hdr = nil
		b = b[need:]
	}
}

// SetDeadline records the write deadline kafka-go sets, so that Write can
// put it back after a produce request's.
func (c *fencedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeBy = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetWriteDeadline records the write deadline kafka-go sets (see
// SetDeadline).
func (c *fencedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeBy = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// Close closes the connection, and leaves the gate. A connection that
// wrote bytes of a produce request the gate no longer lets through is
// aborted instead, so that the kernel does not send them after Close.
func (c *fencedConn) Close() error {
	c.gate.mu.Lock()
	delete(c.gate.conns, c)
	c.gate.mu.Unlock()
	if _, err := c.gate.writeDeadline(); err != nil {
		c.abort()
		return nil
	}
	return c.Conn.Close()
}

// abort closes the connection at once, discarding whatever the kernel
// still holds to send (SO_LINGER 0: the peer gets a reset). A write
// blocked on it returns.
func (c *fencedConn) abort() {
	if c.aborted.Swap(true) {
		return
	}
	if tc, ok := c.raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.raw.Close()
}
