package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"time"
)

// Wake-ups on PostgreSQL. A relay that goes idle asks for a notification
// ([Store.RequestWake]): it moves the sequence <table>_wake to the time, in
// Unix milliseconds on the database's clock, until which it waits. Writers
// read that register at most every wakeCheckEvery, in the transaction they
// write in, and while a relay waits they send a NOTIFY with their rows
// (delivered when they commit). Reading a sequence on every insert, in a
// trigger as earlier versions did, cost every business transaction 5 to 8 %
// on a busy table; the cached read costs one short query per 100 ms per
// process. A writer may thus miss a request for up to wakeCheckEvery, so
// [Store.Listen] also wakes the relay once wakeSettle after each request:
// rows committed by such writers are claimed then, not at the next poll.
// While a relay waits, writers read the register again every 5 ms, so that
// once the relay is awake and busy they stop notifying at once.
const (
	wakeCheckEvery          = 100 * time.Millisecond
	wakeRecheckWhileWaiting = 5 * time.Millisecond
	wakeSettle              = 2*wakeCheckEvery + 50*time.Millisecond
)

// writerWake is a Writer's cached view of the wake-up register.
type writerWake struct {
	check  string // remaining wait in milliseconds, NULL when none can be read
	notify string

	next  atomic.Int64 // Unix ns (local clock) of the next read of the register
	until atomic.Int64 // Unix ns (local clock) until which a relay waits
}

// newWriterWake returns the wake-up of writers of table on PostgreSQL.
// The check never fails on a table of an earlier version (no sequence) nor
// for a writer without the SELECT privilege on it: a failed statement
// would abort the business transaction.
func newWriterWake(table string) *writerWake {
	seq := wakeSequence(table)
	return &writerWake{
		check: `SELECT CASE WHEN has_sequence_privilege(s, 'SELECT') THEN COALESCE(pg_sequence_last_value(s), 0) - (extract(epoch FROM clock_timestamp()) * 1000)::bigint END
			FROM (SELECT to_regclass('` + seq + `') AS s) x`,
		notify: `SELECT pg_notify('` + baseName(table) + `', '')`,
	}
}

// afterInsert sends the notification through q, the writing transaction,
// while a relay waits, reading the register first when the cached value is
// older than wakeCheckEvery. One writer at a time reads it; the others use
// the value they have.
func (w *writerWake) afterInsert(ctx context.Context, q Executor) error {
	now := time.Now().UnixNano()
	if next := w.next.Load(); now >= next && w.next.CompareAndSwap(next, now+int64(wakeCheckEvery)) {
		var left sql.NullInt64
		if err := q.QueryRowContext(ctx, w.check).Scan(&left); err != nil {
			w.next.Store(0) // read again next time
			return fmt.Errorf("read the wake-up register: %w", err)
		}
		until := int64(0)
		if left.Valid && left.Int64 > 0 {
			until = now + left.Int64*int64(time.Millisecond)
			// The relay clears the register when a claim finds messages:
			// read it again soon, so that a burst of writes after an idle
			// period stops notifying within a few milliseconds.
			w.next.Store(now + int64(wakeRecheckWhileWaiting))
		}
		w.until.Store(until)
	}
	if w.until.Load() <= now {
		return nil
	}
	if _, err := q.ExecContext(ctx, w.notify); err != nil {
		return fmt.Errorf("notify the relay: %w", err)
	}
	return nil
}

// settleWake calls the listening notify function, if any, once wakeSettle
// after a wake-up request: writers that had not read the request yet
// wrote without notifying.
func (s *Store) settleWake() {
	if s.listening.Load() == nil {
		return
	}
	time.AfterFunc(wakeSettle, func() {
		if f := s.listening.Load(); f != nil {
			(*f)()
		}
	})
}

// RequestWake implements [relay.WakeRequester]. On PostgreSQL, writers
// ([Writer], and so the GORM plugin) send a NOTIFY with their rows only
// while some relay has asked for one: the sequence <table>_wake holds the
// time until which a relay waits. RequestWake sets it to at least now plus
// LeaseTTL, owner's lease renewals extend it while owner waits, and owner's
// next claim that returns messages (or its release) clears it. (Another
// relay that still waits sets it again at its next renewal, within a
// second, and polls meanwhile.) A relay that polls while messages keep
// coming, as [relay.Relay] does, thus costs writers nothing for its
// wake-ups while the application is busy. Writers read the register at
// most every 100 ms, so a running [Store.Listen] also wakes the relay once
// 250 ms after the request, for rows written by writers that had not read
// it yet. An owner that holds no shard (it stands by, see
// StoreConfig.MaxActiveRelays, or has yet to take its share) only records
// the request, and writers pay nothing for it: the renewal that gives the
// owner shards makes it. On SQLite and MySQL, whose writers notify
// nothing, it does nothing.
func (s *Store) RequestWake(ctx context.Context, owner string) error {
	if s.wake.request == "" {
		return nil
	}
	o := s.owner(owner)
	o.claimMu.Lock()
	defer o.claimMu.Unlock()
	o.mu.Lock()
	holds := len(o.shards) > 0
	if !holds {
		// Nothing to be woken for yet: the renewal that gives the owner
		// shards makes the request (see extendWake).
		o.waiting = true
	}
	o.mu.Unlock()
	if !holds {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, s.wake.request, s.cfg.LeaseTTL.Milliseconds()); err != nil {
		return fmt.Errorf("sqlstore: request wake-up: %w", err)
	}
	o.mu.Lock()
	o.waiting = true
	o.mu.Unlock()
	s.settleWake()
	return nil
}

// extendWake extends the owner's wake-up request with its lease while the
// owner waits. It holds o.mu while it does, since the register is not
// transactional: a claim that finds messages clears o.waiting before it
// clears the register, so a renewal beside it cannot set the register
// again after the claim cleared it.
//
// It reports whether it extended the request. A failure (the register is
// missing, or not writable) only lets the request lapse: writers stop
// notifying, and the relay polls; its next RequestWake reports the error.
func (s *Store) extendWake(ctx context.Context, o *ownerLease, holds bool) bool {
	if s.wake.request == "" || !holds {
		return false // an owner without a shard has nothing to be woken for
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.waiting {
		return false
	}
	_, err := s.db.ExecContext(ctx, s.wake.request, s.cfg.LeaseTTL.Milliseconds())
	return err == nil
}
