package pgcdc

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// markEvery is how often the marker sets published_at on the rows
// published since its last pass (see [Config.SkipMarking]).
const markEvery = 200 * time.Millisecond

// markBatch is the most rows one marking statement updates.
const markBatch = 5000

// published queues the rows of published events for the marker.
func (s *Store) queueMark(ids []int64) {
	if s.cfg.Mode != Table || s.cfg.SkipMarking || len(ids) == 0 {
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
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(markEvery)
	defer t.Stop()
	for {
		stopping := false
		select {
		case <-ctx.Done():
			stopping = true
		case <-t.C:
		}
		s.markMu.Lock()
		ids := s.toMark
		s.toMark = nil
		s.markMu.Unlock()
		for len(ids) > 0 {
			n := min(len(ids), markBatch)
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			var err error
			if conn == nil || conn.IsClosed() {
				conn, err = pgx.Connect(mctx, s.cfg.ConnString)
			}
			if err == nil {
				_, err = conn.Exec(mctx, `UPDATE `+s.cfg.Table+` SET published_at = now() WHERE id = ANY($1) AND published_at IS NULL`, ids[:n])
			}
			cancel()
			if err != nil {
				s.log.Warn("pgcdc: marking published rows failed; trying again", slog.Int("rows", len(ids)), slog.Any("error", err))
				if conn != nil {
					conn.Close(context.Background())
					conn = nil
				}
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
