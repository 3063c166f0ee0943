package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"time"
)

// Half-open connections. A connection that a network fault left half-open
// (a NAT or firewall entry gone) hangs every call until the caller's
// deadline; the pool would hand it, and its idle siblings cut off with it,
// out again, each costing a relay another StoreTimeout. So the store's
// lease, claim and mark statements take their connection through conn,
// which checks a connection idle for more than connCheckAfter with a ping
// of its own deadline (connPingTimeout) and drops it when the ping fails,
// and put it back through release, which drops a connection whose call
// timed out or failed on the network: none is handed out again.
const (
	connCheckAfter  = time.Second
	connPingTimeout = 500 * time.Millisecond
)

// conn takes a connection from the pool that answered within
// connCheckAfter, or answers a ping within connPingTimeout, trying others
// until ctx ends. Hand it back with release.
func (s *Store) conn(ctx context.Context) (Conn, error) {
	var last error
	for {
		// The driver's own session check (pgx pings a connection idle
		// for a second) runs with the connect context: give it the ping's
		// deadline too.
		cctx, cancel := context.WithTimeout(ctx, connPingTimeout)
		c, err := s.db.Conn(cctx)
		cancel()
		if err == nil {
			if s.dialect.name() == SQLite || !s.idleSince(c, connCheckAfter) {
				return c, nil
			}
			pctx, cancel := context.WithTimeout(ctx, connPingTimeout)
			err = c.PingContext(pctx)
			cancel()
			if err == nil {
				s.used(c)
				return c, nil
			}
			c.Discard()
		}
		if ctx.Err() != nil {
			if last != nil && !errors.Is(err, last) {
				err = errors.Join(err, last)
			}
			return nil, err
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, driver.ErrBadConn) && !isTimeout(err) {
			return nil, err // not a connection that hangs: the caller backs off
		}
		last = err
	}
}

// release hands c back to the pool after a call that returned err under
// ctx: a connection whose call timed out, or failed on the network, is
// discarded instead.
func (s *Store) release(ctx context.Context, c Conn, err error) {
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isNetErr(err)) {
		s.forget(c)
		c.Discard()
		return
	}
	s.used(c)
	_ = c.Close()
}

// isNetErr reports whether err is a network error.
func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// idleSince reports whether c was last used by the store more than d ago,
// or never.
func (s *Store) idleSince(c Conn, d time.Duration) bool {
	key := c.Key()
	if key == nil {
		return true
	}
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	t, ok := s.connUsed[key]
	return !ok || time.Since(t) > d
}

// used records that c answered now.
func (s *Store) used(c Conn) {
	key := c.Key()
	if key == nil {
		return
	}
	now := time.Now()
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	if s.connUsed == nil {
		s.connUsed = map[any]time.Time{}
	}
	s.connUsed[key] = now
	if len(s.connUsed) > 64 {
		// An entry older than connCheckAfter says no more than a missing
		// one: drop them, and with them the connections the pool closed.
		for k, t := range s.connUsed {
			if now.Sub(t) > connCheckAfter {
				delete(s.connUsed, k)
			}
		}
	}
}

// forget drops c from the record of connections used.
func (s *Store) forget(c Conn) {
	key := c.Key()
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	delete(s.connUsed, key)
}

// onConn runs fn on a connection taken with conn and handed back with
// release, or on the pool on SQLite, whose connections are files.
func (s *Store) onConn(ctx context.Context, fn func(Executor) error) (err error) {
	if s.dialect.name() == SQLite {
		return fn(s.db)
	}
	c, err := s.conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { s.release(ctx, c, err) }()
	return fn(c)
}
