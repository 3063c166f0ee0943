package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// listenCheckEvery is how long Listen waits for a notification before it
// checks, with a deadline, that its connection still answers: a half-open
// connection (a peer gone without a reset) is noticed within this plus
// listenPingTimeout instead of when the kernel gives up on it.
const (
	listenCheckEvery  = 15 * time.Second
	listenPingTimeout = 5 * time.Second
)

// Listen waits for PostgreSQL notifications on the outbox table's channel
// (sent by writers while a relay waits: see [Store.RequestWake]) and calls
// notify for each, after one initial call once it is listening, and once
// more shortly after each RequestWake through this store. notify may be
// called from another goroutine than Listen's. It holds one pool
// connection, which it discards when it returns, and checks every 15s that
// the connection still answers within 5s. It returns ctx.Err() when ctx is
// done and the connection's error when the connection fails. On SQLite and
// MySQL it returns an error wrapping errors.ErrUnsupported at once: the relay
// then polls.
func (s *Store) Listen(ctx context.Context, notify func()) error {
	return s.dialect.listen(ctx, s, notify)
}

// CanNotify reports whether [Store.Listen] can wait for notifications:
// true on PostgreSQL, false on SQLite and MySQL, where the relay polls
// (relay.New reads it to choose its default poll interval).
func (s *Store) CanNotify() bool {
	return s.cfg.Dialect == Postgres
}

// listen is LISTEN on a session of the driver's, when it can (see
// [Listener]).
func (postgresDialect) listen(ctx context.Context, s *Store, notify func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	conn, err := s.db.Conn(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("sqlstore: listen: %w", err)
	}
	// Listening: never hand the session back to the pool.
	defer conn.Discard()
	l, ok := conn.(Listener)
	if !ok {
		return fmt.Errorf("sqlstore: listen: %w: the driver's connection (%T) cannot wait for notifications (it needs pgx)", errors.ErrUnsupported, conn)
	}
	lctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	err = l.Listen(lctx, `"`+baseName(s.table)+`"`)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("sqlstore: listen: %w", err)
	}
	p := &notify
	s.listening.Store(p)
	defer s.listening.CompareAndSwap(p, nil)
	notify()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenCheckEvery)
		err := l.WaitForNotification(wctx)
		cancel()
		if err == nil {
			notify()
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) || l.IsClosed() {
			return fmt.Errorf("sqlstore: listen: %w", err)
		}
		// Quiet for a while: make sure the connection still answers.
		pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
		err = conn.PingContext(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sqlstore: listen: connection check: %w", err)
		}
		notify() // a notification may have been missed while checking
	}
}
