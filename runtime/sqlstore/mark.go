package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// updateFenced runs the dialect's fenced mark, again when the database
// aborted it to break a deadlock (on MySQL and MariaDB its locking read of
// the lease rows can deadlock with a lease renewal): a mark only changes
// rows still pending and still the owner's, so running it twice is
// harmless.
func (s *Store) updateFenced(ctx context.Context, t storeTables, owner, set string, setArgs []any, ids []int64, events *eventRange) error {
	return retryTransient(ctx, func() error {
		return s.onConn(ctx, func(q Executor) error {
			return s.dialect.updateFenced(ctx, q, t, owner, set, slices.Clone(setArgs), ids, events)
		})
	})
}

// retryTransient runs fn up to three times while it fails with a
// [transient] error: the database aborted its transaction to break a
// deadlock, as MySQL and MariaDB do between concurrent lease transactions,
// and between a lease transaction and a mark.
func retryTransient(ctx context.Context, fn func() error) error {
	var err error
	for range 3 {
		if err = fn(); !transient(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// transient reports whether err is a deadlock or serialization failure for
// which the database aborted the transaction: running it again may succeed.
func transient(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == 1213 // ER_LOCK_DEADLOCK
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		return code == "40P01" || code == "40001" // deadlock_detected, serialization_failure
	}
	return false
}

// failureKind is how a failed message is recorded.
type failureKind int

// Mark implements [relay.Store]. Every statement is fenced by the owner's
// leases: rows of a shard the owner no longer holds are left alone. On
// PostgreSQL the marks commit without waiting for the WAL flush
// (synchronous_commit off): a mark lost in a database crash only publishes
// the message again.
func (s *Store) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	tok, ok := b.Token.(claimToken)
	if !ok {
		return fmt.Errorf("sqlstore: mark: the batch's token is %T, not this store's", b.Token)
	}
	byID := make(map[int64]*runtime.OutboxMessage, len(b.Messages))
	for i := range b.Messages {
		byID[b.Messages[i].ID] = &b.Messages[i]
	}
	t, err := s.tablesNow(ctx)
	if err != nil {
		return err
	}
	ranged := s.layout.Load() == layoutPartitioned
	if err := s.markPublished(ctx, t, tok, o.Published, s.eventRange(ranged, byID, o.Published)); err != nil {
		return err
	}
	if len(o.Failed) == 0 {
		return nil
	}
	// Record the failure on each aggregate's first failed message; the
	// others wait behind it.
	type group struct {
		kind failureKind
		text string
	}
	groups := map[group][]int64{}
	var order []group
	seen := map[aggKey]bool{}
	for _, f := range o.Failed {
		m := byID[f.ID]
		if m == nil {
			return fmt.Errorf("sqlstore: mark: failed id %d is not in the batch", f.ID)
		}
		if f.Lost {
			continue // left pending as it was (relay.Failure.Lost)
		}
		a := aggKey{m.AggregateType, m.AggregateID}
		if seen[a] {
			continue
		}
		seen[a] = true
		g := group{kind: failOutage, text: failureText(f.Err)}
		switch {
		case f.Permanent:
			g.kind = failPark
		case f.Transient:
			// The broker's failure, not the message's (see
			// runtime.TransientError): as in an outage, no attempt.
		case len(o.Published) > 0:
			g.kind = failAttempt
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], f.ID)
	}
	for _, g := range order {
		set, args := s.dialect.failureSet(g.kind, g.text, s.cfg)
		if err := s.updateFenced(ctx, t, tok.owner, set, args, groups[g], s.eventRange(ranged, byID, groups[g])); err != nil {
			return fmt.Errorf("sqlstore: mark: record failed attempt: %w", err)
		}
	}
	return nil
}

type aggKey struct{ typ, id string }

// Layouts of an outbox table (Store.layout).
const (
	layoutPlain       = 1 // pending rows are those with published_at NULL (MySQL, SQLite, PostgreSQL tables of earlier versions)
	layoutPartitioned = 2 // a partitioned PostgreSQL table: as plain, and marks bound the event ids
	layoutQueue       = 3 // a plain PostgreSQL table with its queue of pending rows (see queueDDL)
)

// layoutOf returns the table's layout, asked of the database once per
// store (PostgreSQL) when the table exists: a store made before [Migrate]
// created the table or its queue asks again at its next use.
func (s *Store) layoutOf(ctx context.Context) (int32, error) {
	if l := s.layout.Load(); l != 0 {
		return l, nil
	}
	if s.dialect.name() != Postgres {
		s.layout.Store(layoutPlain)
		return layoutPlain, nil
	}
	var exists, partitioned, queue bool
	err := s.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL,
		EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1)), to_regclass($2) IS NOT NULL`,
		s.table, queueTable(s.table)).Scan(&exists, &partitioned, &queue)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: read the layout of %s: %w", s.table, err)
	}
	l := int32(layoutPlain)
	switch {
	case partitioned:
		l = layoutPartitioned
	case queue:
		l = layoutQueue
	}
	if exists {
		s.layout.Store(l)
	}
	return l, nil
}

// tablesNow returns the store's tables, with the queue when the table has
// one.
func (s *Store) tablesNow(ctx context.Context) (storeTables, error) {
	l, err := s.layoutOf(ctx)
	if err != nil {
		return storeTables{}, err
	}
	t := s.tables
	if l == layoutQueue {
		t.queue = queueTable(s.table)
	}
	return t, nil
}

// eventRange returns the range of the event ids of ids' messages when
// ranged is set, or nil.
func (s *Store) eventRange(ranged bool, byID map[int64]*runtime.OutboxMessage, ids []int64) *eventRange {
	if !ranged || len(ids) == 0 {
		return nil
	}
	var r *eventRange
	for _, id := range ids {
		m := byID[id]
		if m == nil {
			return nil // not from the batch: no bound
		}
		e := m.EventID.String() // lower-case hex: compares as PostgreSQL compares uuids
		switch {
		case r == nil:
			r = &eventRange{e, e}
		case e < r.lo:
			r.lo = e
		case e > r.hi:
			r.hi = e
		}
	}
	return r
}

// markPublished marks ids as published, fenced by the leases of tok's
// owner.
func (s *Store) markPublished(ctx context.Context, t storeTables, tok claimToken, ids []int64, events *eventRange) error {
	if len(ids) == 0 {
		return nil
	}
	set, args := s.dialect.publishedSet()
	switch {
	case s.cfg.DeletePublished:
		set, args = "", nil // a DELETE (see dialect.updateFenced)
	case t.queue != "" && len(tok.retried) > 0:
		// The published rows with a retry schedule (queueFencedSQL).
		published := make(map[int64]bool, len(ids))
		for _, id := range ids {
			published[id] = true
		}
		var retried []int64
		for _, id := range tok.retried {
			if published[id] {
				retried = append(retried, id)
			}
		}
		if len(retried) > 0 {
			args = []any{retried}
		}
	}
	if err := s.updateFenced(ctx, t, tok.owner, set, args, ids, events); err != nil {
		return fmt.Errorf("sqlstore: mark published: %w", err)
	}
	return nil
}

// failureText is the last_error recorded on a message that was not published.
func failureText(err error) string {
	if err == nil {
		return "not published"
	}
	return err.Error()
}
