package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestMigrateQueuesAnEarlierTable migrates a PostgreSQL outbox of the
// layout before the queue (a pending index, published_at set by the mark)
// while a relay of that version holds shards: the migration queues exactly
// the pending rows, drops the pending index, takes the old relay's shards
// and keeps it from taking any again (it would claim by published_at,
// which the queue's mark leaves NULL, and publish every row again); a new
// relay then publishes the pending rows alone, in order, and they read as
// published. A TRUNCATE of the table empties the queue.
func TestMigrateQueuesAnEarlierTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	// Back to the earlier layout.
	for _, q := range []string{
		`DROP TRIGGER outbox_messages_enqueue ON outbox_messages`,
		`DROP TRIGGER outbox_messages_truncate ON outbox_messages`,
		`DROP TRIGGER outbox_messages_lease_guard ON outbox_messages_leases`,
		`DROP FUNCTION outbox_messages_enqueue()`,
		`DROP FUNCTION outbox_messages_lease_guard()`,
		`DROP TABLE outbox_messages_queue`,
		`CREATE INDEX outbox_messages_pending ON outbox_messages (id) WHERE published_at IS NULL AND parked_at IS NULL`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows := writeEvents(t, db, sqlstore.Postgres, "a", "b", "c", "d", "e", "f")
	ids := map[string]int64{}
	r, err := db.QueryContext(ctx, `SELECT aggregate_id, id FROM outbox_messages`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var agg string
		var id int64
		if err := r.Scan(&agg, &id); err != nil {
			t.Fatal(err)
		}
		ids[agg] = id
	}
	if err := r.Err(); err != nil || len(ids) != len(rows) {
		t.Fatalf("read back %d of %d rows: %v", len(ids), len(rows), err)
	}
	// a and b published, c parked, d to f pending; an old relay holds
	// every shard.
	for _, q := range []string{
		`UPDATE outbox_messages SET published_at = now() WHERE aggregate_id IN ('a', 'b')`,
		`UPDATE outbox_messages SET parked_at = now(), attempts = 1 WHERE aggregate_id = 'c'`,
		`UPDATE outbox_messages_leases SET owner = 'old', expires_at = now() + interval '1 hour'`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	queued := func() []int64 {
		t.Helper()
		r, err := db.QueryContext(ctx, `SELECT qid FROM outbox_messages_queue ORDER BY qid`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []int64
		for r.Next() {
			var id int64
			if err := r.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	pending := []int64{ids["d"], ids["e"], ids["f"]}
	if got := queued(); !slices.Equal(got, pending) {
		t.Fatalf("queue after migrating: %v, want the pending rows %v", got, pending)
	}
	var index bool
	var held int
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('outbox_messages_pending') IS NOT NULL,
		(SELECT count(*) FROM outbox_messages_leases WHERE owner IS NOT NULL)`).Scan(&index, &held); err != nil {
		t.Fatal(err)
	}
	if index || held != 0 {
		t.Fatalf("after migrating: pending index kept %v, %d shards still held; want dropped, none", index, held)
	}
	// The old relay's lease acquisition, as that version runs it.
	var taken int
	if err := db.QueryRowContext(ctx, `WITH a AS (UPDATE outbox_messages_leases SET owner = 'old', expires_at = now() + interval '1 minute'
		WHERE shard IN (SELECT shard FROM outbox_messages_leases WHERE owner IS NULL OR expires_at <= now()
			ORDER BY shard LIMIT 64 FOR UPDATE SKIP LOCKED) RETURNING shard) SELECT count(*) FROM a`).Scan(&taken); err != nil {
		t.Fatal(err)
	}
	if taken != 0 {
		t.Fatalf("a relay of the earlier version took %d shards after the migration, want none", taken)
	}
	// Written after the migration: queued by the trigger.
	writeEvents(t, db, sqlstore.Postgres, "g")

	store := mustStore(t, db, sqlstore.StoreConfig{})
	b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "new", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for _, m := range b.Messages {
		claimed = append(claimed, m.AggregateID)
	}
	if want := []string{"d", "e", "f", "g"}; !slices.Equal(claimed, want) {
		t.Fatalf("the new relay claimed %v, want %v in order", claimed, want)
	}
	published := make([]int64, len(b.Messages))
	for i, m := range b.Messages {
		published[i] = m.ID
	}
	if err := store.Mark(ctx, b, relay.Outcome{Published: published}); err != nil {
		t.Fatal(err)
	}
	if got := queued(); len(got) != 0 {
		t.Fatalf("queue after the mark: %v, want empty", got)
	}
	st, err := store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.Parked != 1 {
		t.Fatalf("stats after the mark: %+v, want 0 pending, 1 parked", st)
	}
	entries, err := store.Entries(ctx, sqlstore.Query{State: sqlstore.StatePublished})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.AggregateID)
	}
	if want := []string{"a", "b", "d", "e", "f", "g"}; !slices.Equal(got, want) {
		t.Fatalf("published entries: %v, want %v", got, want)
	}

	writeEvents(t, db, sqlstore.Postgres, "h")
	if got := queued(); len(got) != 1 {
		t.Fatalf("queue after a write: %v, want h's row", got)
	}
	if _, err := db.ExecContext(ctx, `TRUNCATE outbox_messages`); err != nil {
		t.Fatal(err)
	}
	if got := queued(); len(got) != 0 {
		t.Fatalf("queue after TRUNCATE outbox_messages: %v, want empty", got)
	}
}

// TestQueueMarkClearsARetrySchedule: on PostgreSQL's queue the published
// mark writes only the rows that have a retry schedule (they failed
// before): they get published_at and lose next_attempt_at, which takes
// them out of the blocked index; the others are not written at all.
func TestQueueMarkClearsARetrySchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	writeEvents(t, db, sqlstore.Postgres, "failed", "fine")
	store := mustStore(t, db, sqlstore.StoreConfig{RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond})
	claim := func() relay.Batch { t.Helper(); return claimSome(t, store, 10) }
	b := claim()
	var failed, fine int64
	for _, m := range b.Messages {
		if m.AggregateID == "failed" {
			failed = m.ID
		} else {
			fine = m.ID
		}
	}
	if err := store.Mark(ctx, b, relay.Outcome{Published: []int64{fine},
		Failed: []relay.Failure{{ID: failed, Err: errors.New("broker down"), Transient: true}}}); err != nil {
		t.Fatal(err)
	}
	b = claim() // the failed row, once its retry is due
	if len(b.Messages) != 1 || b.Messages[0].ID != failed {
		t.Fatalf("claimed %+v, want the failed row %d alone", b.Messages, failed)
	}
	if err := store.Mark(ctx, b, relay.Outcome{Published: []int64{failed}}); err != nil {
		t.Fatal(err)
	}
	row := func(id int64) (published, scheduled bool) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT published_at IS NOT NULL, next_attempt_at IS NOT NULL FROM outbox_messages WHERE id = $1`, id).Scan(&published, &scheduled); err != nil {
			t.Fatal(err)
		}
		return published, scheduled
	}
	if p, s := row(failed); !p || s {
		t.Errorf("the row published after a failure: published_at set %v, next_attempt_at set %v; want set, cleared", p, s)
	}
	if p, s := row(fine); p || s {
		t.Errorf("the row published at once: published_at set %v, next_attempt_at set %v; want neither (not written)", p, s)
	}
	st, err := store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.Retrying != 0 {
		t.Errorf("stats: %+v, want nothing pending", st)
	}
}

// TestLeaseGuardWhateverTheSearchPath: the lease guard finds the relays
// table through its schema, not the search_path of the session that takes
// shards, so a relay that names the outbox table with its schema from a
// session whose search_path does not reach it takes shards; an owner not
// registered as knowing the queue still gets none. A table migrated with
// the guard's first version (which named the relays table as Migrate was
// given it) gets the new one at the next Migrate.
func TestLeaseGuardWhateverTheSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	// The first version of the guard's function.
	if _, err := db.ExecContext(ctx, `CREATE OR REPLACE FUNCTION outbox_messages_lease_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
		BEGIN
			IF NEW.owner IS NOT NULL AND NEW.owner IS DISTINCT FROM OLD.owner
				AND NOT EXISTS (SELECT 1 FROM outbox_messages_relays r WHERE r.owner = NEW.owner AND r.queue) THEN
				RETURN NULL;
			END IF;
			RETURN NEW;
		END
		$fn$`); err != nil {
		t.Fatal(err)
	}
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `SET search_path TO pg_catalog`); err != nil {
		t.Fatal(err)
	}
	defer c.ExecContext(ctx, `RESET search_path`)
	if _, err := c.ExecContext(ctx, `INSERT INTO `+schema+`.outbox_messages_relays (owner, expires_at, queue)
		VALUES ('new', now() + interval '1 minute', TRUE), ('old', now() + interval '1 minute', FALSE)`); err != nil {
		t.Fatal(err)
	}
	take := func(owner string, shard int) int64 {
		t.Helper()
		res, err := c.ExecContext(ctx, `UPDATE `+schema+`.outbox_messages_leases SET owner = $1, expires_at = now() + interval '1 minute' WHERE shard = $2`, owner, shard)
		if err != nil {
			t.Fatalf("%s takes shard %d from a session whose search_path does not reach the table: %v", owner, shard, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := take("new", 0); n != 1 {
		t.Errorf("a relay that knows the queue took %d shards, want 1", n)
	}
	if n := take("old", 1); n != 0 {
		t.Errorf("a relay of an earlier version took %d shards, want 0", n)
	}
}

// TestQueueClaimPassesHeldRows: the claim passes over the queue's first
// entries when none of their rows can go (each held by an aggregate that
// waits for a retry), whether the rows after them are close behind or far
// (40 rows published between): it returns the claimable rows after them,
// in order, and never an empty batch while some row can go.
func TestQueueClaimPassesHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	store := mustStore(t, db, sqlstore.StoreConfig{RetryDelay: time.Hour, MaxRetryDelay: time.Hour})
	claim := func(limit int) relay.Batch { t.Helper(); return claimSome(t, store, limit) }
	aggregates := func(b relay.Batch) []string {
		var out []string
		for i, m := range b.Messages {
			if i > 0 && m.ID <= b.Messages[i-1].ID {
				t.Fatalf("claimed out of order: %+v", b.Messages)
			}
			out = append(out, m.AggregateID)
		}
		return out
	}
	// held waits at the head of the queue, its later rows queued behind
	// it: the first three entries hold nothing that can go.
	writeEvents(t, db, sqlstore.Postgres, "held", "held", "held")
	b := claim(3)
	if got := aggregates(b); !slices.Equal(got, []string{"held", "held", "held"}) {
		t.Fatalf("first claim: %v", got)
	}
	if err := store.Mark(ctx, b, relay.Outcome{Failed: []relay.Failure{{ID: b.Messages[0].ID, Err: errors.New("broker down"), Transient: true}}}); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, db, sqlstore.Postgres, "f1", "f2")
	if got := aggregates(claim(3)); !slices.Equal(got, []string{"f1", "f2"}) {
		t.Errorf("claim behind held rows: %v, want [f1 f2]", got)
	}
	// Far behind: 40 rows published since, then two pending.
	b = claim(10)
	if err := store.Mark(ctx, b, relay.Outcome{Published: []int64{b.Messages[0].ID, b.Messages[1].ID}}); err != nil {
		t.Fatal(err)
	}
	between := make([]string, 40)
	for i := range between {
		between[i] = fmt.Sprint("p", i)
	}
	writeEvents(t, db, sqlstore.Postgres, between...)
	b = claim(40) // full: the next claim reads the queue as a draining relay does
	var published []int64
	for _, m := range b.Messages {
		published = append(published, m.ID)
	}
	if err := store.Mark(ctx, b, relay.Outcome{Published: published}); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, db, sqlstore.Postgres, "g1", "g2")
	if got := aggregates(claim(4)); !slices.Equal(got, []string{"g1", "g2"}) {
		t.Errorf("claim far behind held rows: %v, want [g1 g2]", got)
	}
}

// TestQueueClaimFillsBehindAHeldWindow checks a draining relay's claim
// whose window (the queue's first entries) holds rows that cannot go: the
// claim takes the window's claimable rows and fills the rest of the batch
// from behind the window, in order, instead of returning a short batch.
func TestQueueClaimFillsBehindAHeldWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	store := mustStore(t, db, sqlstore.StoreConfig{RetryDelay: time.Hour, MaxRetryDelay: time.Hour})
	writeEvents(t, db, sqlstore.Postgres, "held", "held", "held")
	b := claimSome(t, store, 3) // full: the next claims read the window
	if len(b.Messages) != 3 {
		t.Fatalf("first claim: %d rows, want 3", len(b.Messages))
	}
	if err := store.Mark(ctx, b, relay.Outcome{Failed: []relay.Failure{{ID: b.Messages[0].ID, Err: errors.New("broker down"), Transient: true}}}); err != nil {
		t.Fatal(err)
	}
	// The queue: held, held, held, x1, held, x2, x3; the window of a
	// 4-row claim is its first four entries, one of which can go.
	writeEvents(t, db, sqlstore.Postgres, "x1", "held", "x2", "x3")
	b = claimSome(t, store, 4)
	var got []string
	for i, m := range b.Messages {
		if i > 0 && m.ID <= b.Messages[i-1].ID {
			t.Fatalf("claimed out of order: %+v", b.Messages)
		}
		got = append(got, m.AggregateID)
	}
	if !slices.Equal(got, []string{"x1", "x2", "x3"}) {
		t.Errorf("claim of a held window: %v, want [x1 x2 x3]", got)
	}
}

// claimSome claims up to limit rows as owner "r" until a claim returns
// some (the first claims of a new owner take its shards), for 10s at most.
func claimSome(t *testing.T, store *sqlstore.Store, limit int) relay.Batch {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := store.Claim(context.Background(), relay.ClaimRequest{Owner: "r", Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Messages) > 0 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing claimable after 10s")
		}
	}
}
