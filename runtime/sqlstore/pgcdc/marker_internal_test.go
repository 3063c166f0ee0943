package pgcdc

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// TestMarkerSeesOnlyVisibleRows: the marker's statement reports the rows
// it cannot see (a transaction whose commit the stream may deliver before
// the writer's session made it visible: here, one not committed yet), so
// that they are marked on a later pass rather than never; a row already
// published is seen and left alone; once the row is visible it is marked.
// Both for the UPDATE and for DeletePublished's DELETE.
func TestMarkerSeesOnlyVisibleRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, runtimetest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := sqlstore.Migrate(ctx, pgxv5.New(pool), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO outbox_messages (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, occurred_at, published_at)
		VALUES (gen_random_uuid(), 't', 1, 'a', '1', 'x', '{}', now(), $1) RETURNING id`
	for _, del := range []bool{false, true} {
		s := &Store{cfg: Config{Table: sqlstore.DefaultTable, StatementTimeout: DefaultStatementTimeout, DeletePublished: del, Logger: slog.New(slog.DiscardHandler)}, db: pool}
		var pending, published, hidden int64
		if err := pool.QueryRow(ctx, insert, nil).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, insert, "2026-01-01").Scan(&published); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, insert, nil).Scan(&hidden); err != nil {
			t.Fatal(err)
		}
		mark := func(ids ...int64) []int64 {
			t.Helper()
			var missing []int64
			if del {
				missing, err = s.modifySeen(ctx, `DELETE FROM `+s.cfg.Table+` WHERE id = ANY($1) AND published_at IS NULL`, ids)
			} else {
				missing, err = s.updateSeen(ctx, `published_at = now()`, `published_at IS NULL`, ids)
			}
			if err != nil {
				t.Fatal(err)
			}
			return missing
		}
		if diff := cmp.Diff([]int64{hidden}, mark(pending, published, hidden)); diff != "" {
			t.Errorf("DeletePublished %v: rows out of sight (-want +got):\n%s", del, diff)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if missing := mark(hidden); len(missing) != 0 {
			t.Errorf("DeletePublished %v: the committed row still out of sight: %v", del, missing)
		}
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE id = ANY($1) AND published_at IS NULL`, []int64{pending, hidden}).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("DeletePublished %v: %d of the rows left pending", del, left)
		}
	}
}
