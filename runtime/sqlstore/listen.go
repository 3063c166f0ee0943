package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
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

// listen is LISTEN on pgx's connection.
func (postgresDialect) listen(ctx context.Context, s *Store, notify func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	conn, err := s.db.Conn(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("sqlstore: listen: %w", err)
	}
	defer conn.Close()
	var lerr error
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			lerr = fmt.Errorf("sqlstore: listen: %w: the driver is %T, LISTEN needs pgx", errors.ErrUnsupported, dc)
			return nil
		}
		pc := c.Conn()
		lctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
		_, err := pc.Exec(lctx, `LISTEN "`+baseName(s.table)+`"`)
		cancel()
		if err != nil {
			lerr = fmt.Errorf("sqlstore: listen: %w", err)
			return driver.ErrBadConn
		}
		p := &notify
		s.listening.Store(p)
		defer s.listening.CompareAndSwap(p, nil)
		notify()
		for {
			wctx, cancel := context.WithTimeout(ctx, listenCheckEvery)
			_, err := pc.WaitForNotification(wctx)
			cancel()
			if err == nil {
				notify()
				continue
			}
			if ctx.Err() != nil {
				lerr = ctx.Err()
				return driver.ErrBadConn // listening: never hand it back to the pool
			}
			if !errors.Is(err, context.DeadlineExceeded) || pc.IsClosed() {
				lerr = fmt.Errorf("sqlstore: listen: %w", err)
				return driver.ErrBadConn
			}
			// Quiet for a while: make sure the connection still answers.
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err = pc.Ping(pctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					lerr = ctx.Err()
				} else {
					lerr = fmt.Errorf("sqlstore: listen: connection check: %w", err)
				}
				return driver.ErrBadConn
			}
			notify() // a notification may have been missed while checking
		}
	})
	if lerr != nil {
		return lerr
	}
	if err != nil {
		return fmt.Errorf("sqlstore: listen: %w", err)
	}
	return nil
}
