package pgcdc

import (
	"context"
	"log/slog"
	"time"
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
	if s.cfg.Mode != Table || (s.cfg.SkipMarking && !force) || len(ids) == 0 {
		return
	}
	s.markMu.Lock()
	s.toMark = append(s.toMark, ids...)
	s.markMu.Unlock()
}

// mark sets published_at on the queued rows every markEvery, off the
// relay's path, until ctx is done, then once more.
func (s *Store) mark(ctx context.Context) {
	defer close(s.markDone)
	t := time.NewTicker(markEvery)
	defer t.Stop()
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
		for len(ids) > 0 {
			n := min(len(ids), markBatch)
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StatementTimeout)
			_, err := s.db.Exec(mctx, `UPDATE `+s.cfg.Table+` SET published_at = now(), next_attempt_at = NULL WHERE id = ANY($1) AND published_at IS NULL`, ids[:n])
			cancel()
			if err != nil {
				s.log.Warn("pgcdc: marking published rows failed; trying again", slog.Int("rows", len(ids)), slog.Any("error", err))
				s.markMu.Lock()
				s.toMark = append(ids, s.toMark...)
				s.markMu.Unlock()
				break
			}
			ids = ids[n:]
		}
		if stopping {
			return
		}
	}
}
