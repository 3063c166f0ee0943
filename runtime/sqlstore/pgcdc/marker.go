package pgcdc

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// markEvery is how often the marker sets published_at on the rows
// published since its last pass (see [Config.SkipMarking]).
const markEvery = 200 * time.Millisecond

// markBatch is the most rows one marking statement updates.
const markBatch = 5000

// queueMark queues the rows of published events for the marker; force
// queues them even with SkipMarking (rows published from the table, which
// the store must not read as pending again).
func (s *Store) queueMark(ids []int64, force bool) {
	if !force && !s.marking() || len(ids) == 0 {
		return
	}
	s.markMu.Lock()
	s.toMark = append(s.toMark, ids...)
	s.markMu.Unlock()
}

// seenPatience is how many marker passes a row the stream delivered may
// stay out of sight of the store's statements before it is given up for
// gone (deleted) with a warning. A row is out of sight for a moment after
// its transaction's commit record reached the stream: PostgreSQL makes a
// transaction visible to other sessions just after it flushes the commit
// record, which the WAL sender may already have sent.
const seenPatience = 50

// mark sets published_at on the queued rows every markEvery, off the
// relay's path, until ctx is done, then once more. A row not yet visible
// to the marker's statement is marked on a later pass. The slot moves
// past a published event once its row is marked, or a marking pass
// failed (see Store.awaiting).
func (s *Store) mark(ctx context.Context) {
	defer close(s.markDone)
	t := time.NewTicker(markEvery)
	defer t.Stop()
	unseen := map[int64]int{} // row → passes it was out of sight
	for {
		stopping := false
		select {
		case <-ctx.Done():
			stopping = true
		case <-t.C:
		}
		if err := s.hold(ctx); err != nil {
			s.log.Warn("pgcdc: holding events behind parked ones failed; trying again", slog.Any("error", err))
		}
		s.markMu.Lock()
		ids := s.toMark
		s.toMark = nil
		s.markMu.Unlock()
		var later []int64
		for len(ids) > 0 {
			n := min(len(ids), markBatch)
			var missing []int64
			err := s.dequeue(ctx, ids[:n])
			switch {
			case err != nil:
			case s.cfg.DeletePublished:
				missing, err = s.modifySeen(ctx, `DELETE FROM `+s.cfg.Table+` WHERE id = ANY($1) AND published_at IS NULL`, ids[:n])
			default:
				missing, err = s.updateSeen(ctx, `published_at = now(), next_attempt_at = NULL`, `published_at IS NULL`, ids[:n])
			}
			if err != nil {
				// Tried again on the next pass; meanwhile the slot need
				// not wait for the marks: a server shutting down refuses
				// new connections and waits for the stream to confirm
				// what it sent. Only a crash before they are written
				// leaves these rows looking pending.
				s.log.Warn("pgcdc: marking published rows failed; trying again", slog.Int("rows", len(ids)), slog.Any("error", err))
				later = append(later, ids...)
				s.marked(ids)
				break
			}
			retry := map[int64]bool{}
			for _, id := range missing {
				if unseen[id]++; unseen[id] < seenPatience {
					retry[id] = true
					later = append(later, id)
				} else {
					delete(unseen, id)
					s.log.Warn("pgcdc: a published row is not in the table (deleted?); it stays unmarked", slog.Int64("outbox_id", id))
				}
			}
			done := ids[:n]
			if len(retry) > 0 {
				done = slices.DeleteFunc(slices.Clone(done), func(id int64) bool { return retry[id] })
			}
			for _, id := range done {
				delete(unseen, id)
			}
			s.marked(done)
			ids = ids[n:]
		}
		if len(later) > 0 {
			s.markMu.Lock()
			s.toMark = append(later, s.toMark...)
			s.markMu.Unlock()
		}
		if stopping {
			return
		}
	}
}

// updateSeen runs UPDATE Table SET set WHERE id = ANY(ids) AND cond and
// returns the ids of ids that no row of the table has in the statement's
// snapshot: rows not visible yet (see seenPatience), or deleted.
// dequeue takes ids out of the table's queue of pending rows, when it has
// one (sqlstore.QueueTable), which the polling relay claims from: the
// table then says what the polling relay's mark would.
func (s *Store) dequeue(ctx context.Context, ids []int64) error {
	if !s.queued {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StatementTimeout)
	defer cancel()
	_, err := s.db.Exec(dctx, `DELETE FROM `+sqlstore.QueueTable(s.cfg.Table)+` WHERE qid = ANY($1)`, ids)
	return err
}

func (s *Store) updateSeen(ctx context.Context, set, cond string, ids []int64, args ...any) (missing []int64, err error) {
	return s.modifySeen(ctx, `UPDATE `+s.cfg.Table+` SET `+set+` WHERE id = ANY($1) AND `+cond, ids, args...)
}

// modifySeen runs modify (an UPDATE or DELETE of the rows whose id is in
// $1) and returns the ids of ids that no row of the table has in the
// statement's snapshot, as updateSeen.
func (s *Store) modifySeen(ctx context.Context, modify string, ids []int64, args ...any) (missing []int64, err error) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StatementTimeout)
	defer cancel()
	// Every row found and modified, the usual case: one index probe per
	// row. Otherwise the statement runs again on the others, looking for
	// the rows it cannot see.
	rows, err := s.db.Query(uctx, `WITH u AS (`+modify+` RETURNING id) SELECT id FROM u`, append([]any{ids}, args...)...)
	if err != nil {
		return nil, err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(done) == len(ids) {
		return nil, nil
	}
	seen := make(map[int64]bool, len(done))
	for _, id := range done {
		seen[id] = true
	}
	rest := slices.DeleteFunc(slices.Clone(ids), func(id int64) bool { return seen[id] })
	rows, err = s.db.Query(uctx, `WITH u AS (`+modify+` RETURNING id)
		SELECT i FROM unnest($1::bigint[]) AS i WHERE NOT EXISTS (SELECT 1 FROM `+s.cfg.Table+` o WHERE o.id = i)`, append([]any{rest}, args...)...)
	if err != nil {
		return nil, err
	}
	missing, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	return missing, nil
}
