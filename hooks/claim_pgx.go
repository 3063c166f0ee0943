package hooks

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/runtime"
)

// claimSQL claims a batch (see [Store.Claim]): the first pending rows by id
// that are not parked and whose aggregate has no message waiting for its
// retry (waitingSQL) — so a failing aggregate holds back only itself, however
// many rows it has. Besides the rows it returns, per row, the number of
// such eligible rows up to the last claimed id: more than claimed means
// SKIP LOCKED passed over rows another relay holds, and their aggregates
// must then be left out (dropBlocked). It also turns synchronous_commit off
// for the claim's transaction: a mark lost in a crash only republishes the
// batch (at-least-once), so the marking commit need not wait for the WAL
// flush.
func (s *Store) claimSQL() string {
	return `WITH w AS MATERIALIZED (` + s.waitingSQL("now()") + `),
		c AS (SELECT ` + selectColumns + ` FROM ` + s.table + ` o
			WHERE o.published_at IS NULL AND o.parked_at IS NULL
			AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM w)
			ORDER BY o.id LIMIT $1 FOR UPDATE SKIP LOCKED)
		SELECT c.*, (SELECT count(*) FROM ` + s.table + ` o
			WHERE o.published_at IS NULL AND o.parked_at IS NULL
			AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM w)
			AND o.id <= (SELECT max(id) FROM c))
		FROM c CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS sc ORDER BY c.id`
}

// waitingSQL selects the aggregates that have a pending message waiting for
// its retry at time now (an SQL expression).
func (s *Store) waitingSQL(now string) string {
	return `SELECT DISTINCT aggregate_type, aggregate_id FROM ` + s.table +
		` WHERE next_attempt_at > ` + now + ` AND published_at IS NULL AND parked_at IS NULL`
}

// errNotPgx reports a pinned connection whose driver is not pgx.
var errNotPgx = errors.New("not a pgx connection")

// claimPinned runs a claim on the store's pinned connection through pgx,
// pipelining statements so a claim costs two round trips: BEGIN with the
// claim statement, then the marks with COMMIT. The caller holds pinMu. It
// returns errNotPgx when the driver is not pgx.
func (s *Store) claimPinned(ctx context.Context, limit int, publish func(ctx context.Context, msgs []runtime.OutboxMessage) ([]int64, error)) (int, error) {
	for attempt := 0; ; attempt++ {
		if s.pinned == nil {
			c, err := s.db.Conn(ctx)
			if err != nil {
				return 0, fmt.Errorf("hooks: claim: %w", err)
			}
			s.pinned = c
		}
		var (
			n       int
			cerr    error
			started bool // a transaction reached the server
		)
		rawErr := s.pinned.Raw(func(dc any) error {
			c, ok := dc.(*stdlib.Conn)
			if !ok {
				cerr = errNotPgx
				return nil
			}
			pc := c.Conn()
			n, started, cerr = s.claimPgx(ctx, pc, limit, publish)
			if cerr != nil && !s.rollback(ctx, pc) {
				return driver.ErrBadConn // the pool closes it
			}
			return nil
		})
		if rawErr != nil {
			_ = s.pinned.Close()
			s.pinned = nil
			if rawErr != nil && !errors.Is(rawErr, driver.ErrBadConn) && cerr == nil {
				cerr = fmt.Errorf("hooks: claim: %w", rawErr)
			}
			// A connection that broke before the claim started (killed
			// while idle, say) is replaced once, at no risk.
			if !started && attempt == 0 && ctx.Err() == nil {
				continue
			}
		}
		return n, cerr
	}
}

// rollback ends a failed claim's transaction; it reports whether the
// connection is still usable.
func (s *Store) rollback(ctx context.Context, pc *pgx.Conn) bool {
	if pc.IsClosed() {
		return false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := pc.Exec(rctx, "ROLLBACK")
	return err == nil
}

func (s *Store) claimPgx(ctx context.Context, pc *pgx.Conn, limit int, publish func(ctx context.Context, msgs []runtime.OutboxMessage) ([]int64, error)) (n int, started bool, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.claimSQL(), limit)
	br := pc.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, false, fmt.Errorf("hooks: claim: begin: %w", err)
	}
	started = true
	msgs, pendingUpTo, err := scanPgx(br, limit)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return 0, started, fmt.Errorf("hooks: claim: select pending: %w", err)
	}
	if len(msgs) == 0 {
		if _, err := pc.Exec(ctx, "COMMIT"); err != nil {
			return 0, started, fmt.Errorf("hooks: claim: commit: %w", err)
		}
		return 0, started, nil
	}
	if pendingUpTo > int64(len(msgs)) {
		if msgs, err = s.dropBlockedPgx(ctx, pc, msgs); err != nil {
			return 0, started, err
		}
		if len(msgs) == 0 {
			if _, err := pc.Exec(ctx, "COMMIT"); err != nil {
				return 0, started, fmt.Errorf("hooks: claim: commit: %w", err)
			}
			return 0, started, nil
		}
	}
	published, perr := publish(ctx, msgs)
	if err := ctx.Err(); err != nil {
		return len(msgs), started, fmt.Errorf("hooks: claim: %w", err)
	}
	done, failed := splitPublished(msgs, published)
	b = &pgx.Batch{}
	if len(done) > 0 {
		b.Queue(`UPDATE `+s.table+` SET published_at = now() WHERE id = ANY($1)`, done)
	}
	retry, park := failureHeads(msgs, failed, perr)
	for i, heads := range [][]int64{retry, park} {
		if len(heads) > 0 {
			set, args := s.failureSet(perr, len(done) > 0, i == 1)
			b.Queue(`UPDATE `+s.table+` SET `+set+` WHERE id = ANY($`+fmt.Sprint(len(args)+1)+`)`, append(args, heads)...)
		}
	}
	b.Queue("COMMIT")
	if err := pc.SendBatch(ctx, b).Close(); err != nil {
		return len(msgs), started, fmt.Errorf("hooks: claim: mark and commit: %w", err)
	}
	if perr != nil {
		return len(msgs), started, fmt.Errorf("hooks: claim: publish: %w", perr)
	}
	return len(msgs), started, nil
}

// scanPgx reads the claim statement's rows.
func scanPgx(br pgx.BatchResults, limit int) ([]runtime.OutboxMessage, int64, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	msgs := make([]runtime.OutboxMessage, 0, min(limit, 1024))
	var pendingUpTo int64
	for rows.Next() {
		var (
			m       runtime.OutboxMessage
			id      pgtype.UUID
			headers []byte
			payload []byte
		)
		if err := rows.Scan(&m.ID, &id, &m.EventType, &m.EventVersion, &m.AggregateType, &m.AggregateID,
			&m.Topic, &payload, &headers, &m.OccurredAt, &m.CreatedAt, &m.Attempts, &pendingUpTo); err != nil {
			return nil, 0, err
		}
		m.EventID = uuid.UUID(id.Bytes)
		m.Payload = payload
		if err := decodeHeaders(headers, &m); err != nil {
			return nil, 0, err
		}
		m.OccurredAt = m.OccurredAt.UTC()
		m.CreatedAt = m.CreatedAt.UTC()
		msgs = append(msgs, m)
	}
	return msgs, pendingUpTo, rows.Err()
}

func (s *Store) dropBlockedPgx(ctx context.Context, pc *pgx.Conn, msgs []runtime.OutboxMessage) ([]runtime.OutboxMessage, error) {
	types, ids := claimedAggregates(msgs)
	rows, err := pc.Query(ctx, s.firstPendingSQL(), types, ids)
	if err != nil {
		return nil, fmt.Errorf("hooks: claim: check aggregate order: %w", err)
	}
	defer rows.Close()
	return keepUnblocked(msgs, rows)
}
