package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// rebind turns "?" placeholders into PostgreSQL's "$n".
func rebind(d sqlstore.Dialect, q string) string {
	if d != sqlstore.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// publishedRows is the WHERE condition of the outbox_messages rows a
// relay published: on PostgreSQL, those neither queued nor parked (the
// queue's mark does not write the row), or with published_at set.
func publishedRows(d sqlstore.Dialect) string {
	if d == sqlstore.Postgres {
		return "(published_at IS NOT NULL OR (parked_at IS NULL AND id NOT IN (SELECT qid FROM " + sqlstore.QueueTable(sqlstore.DefaultTable) + ")))"
	}
	return "published_at IS NOT NULL"
}

// count runs a SELECT count(*) query.
func count(t *testing.T, db *sql.DB, d sqlstore.Dialect, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(rebind(d, q), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestRetentionDeletesOnlyOldPublishedAndOldInbox(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d) // o1, o2 published; o3 parked; o4 retrying; the rest pending
			db := f.db
			old := time.Now().Add(-2 * time.Hour).UTC()
			// o1 was published two hours ago; o2 just now. The parked and
			// pending rows are as old, which must not matter.
			if _, err := db.Exec(rebind(d, `UPDATE outbox_messages SET published_at = ?, created_at = ? WHERE id = ?`), old, old.Add(-time.Second), f.ids["o1"]); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(rebind(d, `UPDATE outbox_messages SET parked_at = ?, created_at = ? WHERE id = ?`), old, old, f.ids["o3"]); err != nil {
				t.Fatal(err)
			}
			// (Not o2: on PostgreSQL's queue a row the mark published has
			// no published_at, and its age counts from created_at.)
			if _, err := db.Exec(rebind(d, `UPDATE outbox_messages SET created_at = ? WHERE id NOT IN (?, ?)`), old, f.ids["o1"], f.ids["o2"]); err != nil {
				t.Fatal(err)
			}
			// Inbox markers: consumers a and b, one old and one new each.
			if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: d, Inbox: true}); err != nil {
				t.Fatal(err)
			}
			inbox, err := sqlstore.NewInbox(d, "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{"a", "b"} {
				for _, at := range []time.Time{old, time.Now().UTC()} {
					if _, err := db.Exec(rebind(d, `INSERT INTO outbox_inbox (consumer, event_id, event_type, processed_at) VALUES (?, ?, ?, ?)`),
						c, runtime.NewEventID().String(), "orders.placed", at); err != nil {
						t.Fatal(err)
					}
				}
			}
			if cs, err := inbox.Consumers(ctx, databasesql.Executor(db)); err != nil || strings.Join(cs, ",") != "a,b" {
				t.Fatalf("Consumers = %v, %v; want a, b", cs, err)
			}

			var passes []sqlstore.RetentionResult
			r, err := sqlstore.NewRetention(f.store, sqlstore.RetentionConfig{
				PublishedAge: time.Hour, Inbox: inbox, InboxDB: databasesql.New(db), InboxAge: time.Hour, BatchSize: 1,
				OnPass: func(res sqlstore.RetentionResult) { passes = append(passes, res) },
			})
			if err != nil {
				t.Fatal(err)
			}
			res := r.RunOnce(ctx)
			if res.Err != nil || res.Published != 1 || res.Inbox != 2 || len(passes) != 1 {
				t.Fatalf("pass: %+v (%d reported)", res, len(passes))
			}
			if res.Batches < 3 { // batch size 1: a full batch, then an empty one, per table and consumer
				t.Errorf("pass ran %d batches with batch size 1", res.Batches)
			}
			left, err := f.store.Entries(ctx, sqlstore.Query{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(aggs(left), ","); got != "o2,o3,o4,o5,o6,p1,p2" {
				t.Errorf("rows left: %s; want every row but o1", got)
			}
			if n := count(t, db, d, `SELECT count(*) FROM outbox_inbox WHERE processed_at < ?`, time.Now().Add(-time.Hour).UTC()); n != 0 {
				t.Errorf("%d old inbox markers left", n)
			}
			if n := count(t, db, d, `SELECT count(*) FROM outbox_inbox`); n != 2 {
				t.Errorf("%d inbox markers left, want the 2 new ones", n)
			}
			if res := r.RunOnce(ctx); res.Err != nil || res.Published != 0 || res.Inbox != 0 {
				t.Errorf("second pass: %+v", res)
			}

			for _, bad := range []sqlstore.RetentionConfig{{PublishedAge: -1}, {Inbox: inbox}, {BatchSize: -1}} {
				if _, err := sqlstore.NewRetention(f.store, bad); err == nil {
					t.Errorf("NewRetention(%+v) accepted", bad)
				}
			}
			if _, err := sqlstore.NewRetention(nil, sqlstore.RetentionConfig{}); err == nil {
				t.Error("NewRetention with nothing to prune accepted")
			}
		})
	}
}

// countingPublisher records the event ids it published.
type countingPublisher struct {
	mu  sync.Mutex
	got map[string]int
}

func (p *countingPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got[m.UUID]++
	}
	return nil
}

func (p *countingPublisher) Close() error { return nil }

func (p *countingPublisher) published() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got)
}

// TestRetentionBesideWritersAndRelay runs a retention that deletes every
// published row at once, in small batches, beside writers and a relay:
// nothing fails, every event is published, and no pending row is deleted.
func TestRetentionBesideWritersAndRelay(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 4, 150
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			db := migrated(t, d)
			store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			pub := &countingPublisher{got: map[string]int{}}
			rl, err := relay.New(store, pub, relay.Config{BatchSize: 50, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu       sync.Mutex
				failures []error
				deleted  int64
			)
			ret, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{
				PublishedAge: time.Microsecond, Interval: time.Millisecond, BatchSize: 7,
				Logger: slog.New(slog.DiscardHandler),
				OnPass: func(res sqlstore.RetentionResult) {
					mu.Lock()
					defer mu.Unlock()
					deleted += res.Published
					if res.Err != nil && !errors.Is(res.Err, context.Canceled) {
						failures = append(failures, res.Err)
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			var bg sync.WaitGroup
			bg.Go(func() {
				if err := rl.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("relay: %v", err)
				}
			})
			bg.Go(func() { _ = ret.Run(ctx) })

			w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range writers {
				wg.Go(func() {
					for j := range perWriter {
						if _, err := w.Write(ctx, databasesql.Executor(db), writeRows(fmt.Sprintf("w%d-%d", i, j%10))); err != nil {
							t.Errorf("writer %d: %v", i, err)
							return
						}
					}
				})
			}
			wg.Wait()
			deadline := time.Now().Add(60 * time.Second)
			for pub.published() < writers*perWriter && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polling for the outcome, not synchronising
			}
			if n := pub.published(); n != writers*perWriter {
				t.Fatalf("published %d of %d events", n, writers*perWriter)
			}
			// The retention catches up with the last published rows, and
			// reports the pass that deleted them (the table could be empty
			// before that pass's OnPass: a CI run then counted 597 of 600).
			reported := func() int64 {
				mu.Lock()
				defer mu.Unlock()
				return deleted
			}
			for (reported() < writers*perWriter || count(t, db, d, `SELECT count(*) FROM outbox_messages`) > 0) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polling for the outcome
			}
			cancel()
			bg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(failures) > 0 {
				t.Errorf("%d retention passes failed; first: %v", len(failures), failures[0])
			}
			if n := count(t, db, d, `SELECT count(*) FROM outbox_messages`); n != 0 || deleted != writers*perWriter {
				t.Errorf("%d rows left, %d deleted; want 0 and %d", n, deleted, writers*perWriter)
			}
		})
	}
}
