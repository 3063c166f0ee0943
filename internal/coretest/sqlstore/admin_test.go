package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// adminFixture is an outbox with rows in every state: on topic "orders",
// o1 and o2 published, o3 parked, o4 retrying, o5 and o6 pending; on topic
// "payments", p1 and p2 pending.
type adminFixture struct {
	db    *sql.DB
	store *sqlstore.Store
	ids   map[string]int64 // aggregate id -> row id
	rows  map[string]sqlstore.Row
}

func newAdminFixture(t *testing.T, d sqlstore.Dialect) adminFixture {
	t.Helper()
	ctx := context.Background()
	db := migrated(t, d)
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{RetryDelay: time.Hour, MaxRetryDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rows := writeRows("o1", "o2", "o3", "o4", "o5", "o6")
	for _, r := range writeRows("p1", "p2") {
		r.Topic, r.Envelope.EventType, r.Envelope.AggregateType = "payments", "payments.made", "payment"
		rows = append(rows, r)
	}
	w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		t.Fatal(err)
	}
	f := adminFixture{db: db, store: store, ids: map[string]int64{}, rows: map[string]sqlstore.Row{}}
	b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "admin-test", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Messages) != len(rows) {
		t.Fatalf("claimed %d messages, want %d", len(b.Messages), len(rows))
	}
	for _, m := range b.Messages {
		f.ids[m.AggregateID] = m.ID
	}
	for _, r := range rows {
		f.rows[r.Envelope.AggregateID] = r
	}
	err = store.Mark(ctx, b, relay.Outcome{
		Published: []int64{f.ids["o1"], f.ids["o2"]},
		Failed: []relay.Failure{
			{ID: f.ids["o3"], Err: errors.New("too large"), Permanent: true},
			{ID: f.ids["o4"], Err: errors.New("broker said no")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, "admin-test"); err != nil {
		t.Fatal(err)
	}
	return f
}

// aggs returns the aggregate ids of entries, in order.
func aggs(es []sqlstore.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.AggregateID
	}
	return out
}

// TestBlockedByNamesTheParkedRow: a pending row behind a parked row of its
// aggregate says which (Entry.BlockedBy), in Entries and Entry; other rows
// say nothing (found by a new user: the held row showed 0 attempts and no
// error, and nothing said why it waited).
func TestBlockedByNamesTheParkedRow(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d)
			writeEvents(t, f.db, d, "o3", "o5") // behind o3's parked row; o5's is pending, not parked
			got, err := f.store.Entries(ctx, sqlstore.Query{State: sqlstore.StatePending})
			if err != nil {
				t.Fatal(err)
			}
			blocked := map[string][]int64{}
			for _, e := range got {
				blocked[e.AggregateID] = append(blocked[e.AggregateID], e.BlockedBy)
			}
			want := map[string][]int64{"o3": {f.ids["o3"]}, "o4": {0}, "o5": {0, 0}, "o6": {0}, "p1": {0}, "p2": {0}}
			if !maps.EqualFunc(blocked, want, slices.Equal) {
				t.Errorf("BlockedBy per aggregate = %v, want %v", blocked, want)
			}
			held := got[len(got)-2] // the o3 row just written, before o5's
			if held.AggregateID != "o3" {
				t.Fatalf("row %d is %s's, want o3's", held.ID, held.AggregateID)
			}
			one, err := f.store.Entry(ctx, held.ID)
			if err != nil || one.BlockedBy != f.ids["o3"] {
				t.Errorf("Entry(%d).BlockedBy = %d, %v; want %d", held.ID, one.BlockedBy, err, f.ids["o3"])
			}
			parked, err := f.store.Entry(ctx, f.ids["o3"])
			if err != nil || parked.BlockedBy != 0 {
				t.Errorf("the parked row's BlockedBy = %d, %v; want 0", parked.BlockedBy, err)
			}
		})
	}
}

func TestAdminEntries(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d)
			s := f.store
			for _, tc := range []struct {
				name string
				q    sqlstore.Query
				want []string
			}{
				{"all", sqlstore.Query{}, []string{"o1", "o2", "o3", "o4", "o5", "o6", "p1", "p2"}},
				{"pending includes retrying", sqlstore.Query{State: sqlstore.StatePending}, []string{"o4", "o5", "o6", "p1", "p2"}},
				{"retrying", sqlstore.Query{State: sqlstore.StateRetrying}, []string{"o4"}},
				{"parked", sqlstore.Query{State: sqlstore.StateParked}, []string{"o3"}},
				{"published", sqlstore.Query{State: sqlstore.StatePublished}, []string{"o1", "o2"}},
				{"topic", sqlstore.Query{Topic: "payments"}, []string{"p1", "p2"}},
				{"event type and state", sqlstore.Query{EventType: "orders.placed", State: sqlstore.StatePending}, []string{"o4", "o5", "o6"}},
				{"aggregate", sqlstore.Query{AggregateType: "order", AggregateID: "o5"}, []string{"o5"}},
				{"aggregate of another type", sqlstore.Query{AggregateType: "payment", AggregateID: "o5"}, []string{}},
				{"event id", sqlstore.Query{EventID: f.rows["p2"].Envelope.EventID}, []string{"p2"}},
				{"after id", sqlstore.Query{AfterID: f.ids["o5"]}, []string{"o6", "p1", "p2"}},
				{"limit", sqlstore.Query{Limit: 2, AfterID: f.ids["o1"]}, []string{"o2", "o3"}},
			} {
				got, err := s.Entries(ctx, tc.q)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if g := aggs(got); !slices.Equal(g, tc.want) {
					t.Errorf("%s: got %v, want %v", tc.name, g, tc.want)
				}
			}

			// Paging by AfterID visits every row once, in order.
			var paged []string
			after := int64(0)
			for range 10 {
				page, err := s.Entries(ctx, sqlstore.Query{AfterID: after, Limit: 3})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				paged = append(paged, aggs(page)...)
				after = page[len(page)-1].ID
			}
			if want := []string{"o1", "o2", "o3", "o4", "o5", "o6", "p1", "p2"}; !slices.Equal(paged, want) {
				t.Errorf("paged %v, want %v", paged, want)
			}

			for _, q := range []sqlstore.Query{{State: "stuck"}, {Limit: -1}, {AfterID: -1}} {
				if _, err := s.Entries(ctx, q); !errors.Is(err, sqlstore.ErrInvalidQuery) {
					t.Errorf("Entries(%+v) = %v, want ErrInvalidQuery", q, err)
				}
			}
		})
	}
}

func TestAdminEntry(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d)
			s := f.store
			entry := func(agg string) sqlstore.Entry {
				t.Helper()
				e, err := s.Entry(ctx, f.ids[agg])
				if err != nil {
					t.Fatal(err)
				}
				if e.ID != f.ids[agg] || e.AggregateID != agg {
					t.Fatalf("Entry(%d) is row %d of %s", f.ids[agg], e.ID, e.AggregateID)
				}
				return e
			}
			pub := entry("o1")
			want := f.rows["o1"].Envelope
			// On PostgreSQL the queue's mark does not write the row: no
			// published_at.
			if pub.State != sqlstore.StatePublished || pub.PublishedAt.IsZero() != (d == sqlstore.Postgres) || !pub.ParkedAt.IsZero() ||
				pub.EventID != want.EventID || string(pub.Payload) != string(want.Payload) || pub.Topic != "orders" ||
				pub.EventType != want.EventType || !pub.OccurredAt.Equal(want.OccurredAt) || pub.CreatedAt.IsZero() {
				t.Errorf("published entry: %+v", pub)
			}
			if since := time.Since(pub.PublishedAt); d != sqlstore.Postgres && (since < -time.Minute || since > time.Minute) {
				t.Errorf("published at %v, %v ago", pub.PublishedAt, since)
			}
			parked := entry("o3")
			if parked.State != sqlstore.StateParked || parked.ParkedAt.IsZero() || parked.LastError != "too large" ||
				parked.Attempts != 1 || !parked.PublishedAt.IsZero() {
				t.Errorf("parked entry: %+v", parked)
			}
			retrying := entry("o4")
			if retrying.State != sqlstore.StateRetrying || retrying.LastError != "broker said no" || retrying.Attempts != 1 ||
				time.Until(retrying.NextAttemptAt) < 30*time.Minute || time.Until(retrying.NextAttemptAt) > 2*time.Hour {
				t.Errorf("retrying entry (next attempt in %v): %+v", time.Until(retrying.NextAttemptAt), retrying)
			}
			pending := entry("p1")
			if pending.State != sqlstore.StatePending || pending.LastError != "" || !pending.NextAttemptAt.IsZero() ||
				!pending.PublishedAt.IsZero() || !pending.ParkedAt.IsZero() || pending.Topic != "payments" {
				t.Errorf("pending entry: %+v", pending)
			}
			if _, err := s.Entry(ctx, 1<<40); !errors.Is(err, sqlstore.ErrNotFound) {
				t.Errorf("Entry of a missing id: %v, want ErrNotFound", err)
			}
		})
	}
}

func TestAdminStatsByType(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d)
			got, err := f.store.StatsByType(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].Topic != "orders" || got[0].EventType != "orders.placed" ||
				got[1].Topic != "payments" || got[1].EventType != "payments.made" {
				t.Fatalf("groups: %+v", got)
			}
			o, p := got[0].Stats, got[1].Stats
			if o.Pending != 3 || o.Retrying != 1 || o.Parked != 1 || p.Pending != 2 || p.Retrying != 0 || p.Parked != 0 {
				t.Errorf("orders %+v, payments %+v", o, p)
			}
			for _, g := range got {
				if g.OldestPending < 0 || g.OldestPending > time.Minute {
					t.Errorf("%s oldest pending %v", g.Topic, g.OldestPending)
				}
			}
			// The groups add up to Stats.
			total, err := f.store.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if total.Pending != o.Pending+p.Pending || total.Retrying != o.Retrying+p.Retrying || total.Parked != o.Parked+p.Parked {
				t.Errorf("Stats %+v is not the sum of %+v and %+v", total, o, p)
			}
		})
	}
}

func TestAdminReplay(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d)
			s := f.store
			replay := func(r sqlstore.ReplayRange, want int64) {
				t.Helper()
				n, err := s.Replay(ctx, r)
				if err != nil {
					t.Fatalf("Replay(%+v): %v", r, err)
				}
				if n != want {
					t.Fatalf("Replay(%+v) replayed %d rows, want %d", r, n, want)
				}
			}
			for _, bad := range []sqlstore.ReplayRange{
				{}, {Topic: "orders"}, {FromID: 5, ToID: 4}, {FromID: -1},
				{Since: time.Now(), Until: time.Now().Add(-time.Hour)},
			} {
				if _, err := s.Replay(ctx, bad); !errors.Is(err, sqlstore.ErrInvalidQuery) {
					t.Errorf("Replay(%+v) = %v, want ErrInvalidQuery", bad, err)
				}
			}
			// Ranges that hold no published row change nothing: o3 (parked)
			// and the pending rows are left alone.
			replay(sqlstore.ReplayRange{FromID: f.ids["o3"]}, 0)
			replay(sqlstore.ReplayRange{Until: time.Now().Add(-time.Hour)}, 0)
			replay(sqlstore.ReplayRange{Since: time.Now().Add(time.Hour)}, 0)
			replay(sqlstore.ReplayRange{FromID: f.ids["o1"], Topic: "payments"}, 0)

			replay(sqlstore.ReplayRange{FromID: f.ids["o2"], ToID: f.ids["o2"]}, 1)
			e, err := s.Entry(ctx, f.ids["o2"])
			if err != nil {
				t.Fatal(err)
			}
			if e.State != sqlstore.StatePending || !e.PublishedAt.IsZero() || e.Attempts != 0 || e.LastError != "" {
				t.Errorf("replayed row: %+v", e)
			}
			replay(sqlstore.ReplayRange{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour), Topic: "orders"}, 1) // o1
			if parked, err := s.Entry(ctx, f.ids["o3"]); err != nil || parked.State != sqlstore.StateParked {
				t.Errorf("parked row after replay: %+v, %v", parked, err)
			}

			// The relay publishes the replayed rows again, first, in id
			// order; o4 still waits for its retry.
			b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "replay-test", Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range b.Messages {
				got = append(got, m.AggregateID)
			}
			if want := []string{"o1", "o2", "o5", "o6", "p1", "p2"}; !slices.Equal(got, want) {
				t.Errorf("claimed %v after replay, want %v", got, want)
			}
			if err := s.Mark(ctx, b, relay.Outcome{Published: []int64{f.ids["o1"], f.ids["o2"]}}); err != nil {
				t.Fatal(err)
			}
			if pub, err := s.Entries(ctx, sqlstore.Query{State: sqlstore.StatePublished}); err != nil || !slices.Equal(aggs(pub), []string{"o1", "o2"}) {
				t.Errorf("published after the replay's publish: %v, %v", aggs(pub), err)
			}
			_ = s.Release(ctx, "replay-test")
		})
	}
}

// TestReplayOfOldRows: a replayed row keeps its created_at, so it counts as
// pending since its first commit (Stats.OldestPending, which the health and
// dashboard views read), and the retention, which deletes by published_at,
// leaves it alone while it is pending and after it is published again.
func TestReplayOfOldRows(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newAdminFixture(t, d) // o1, o2 published; o3 parked; o4 retrying; the rest pending
			old := time.Now().Add(-2 * time.Hour).UTC()
			if _, err := f.db.Exec(rebind(d, `UPDATE outbox_messages SET published_at = ?, created_at = ? WHERE id = ?`), old, old, f.ids["o1"]); err != nil {
				t.Fatal(err)
			}
			if n, err := f.store.Replay(ctx, sqlstore.ReplayRange{FromID: f.ids["o1"], ToID: f.ids["o1"]}); err != nil || n != 1 {
				t.Fatalf("Replay: %d, %v; want 1 row", n, err)
			}
			st, err := f.store.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.OldestPending < 90*time.Minute {
				t.Errorf("OldestPending after replaying a 2h-old row: %v, want about 2h", st.OldestPending)
			}

			ret, err := sqlstore.NewRetention(f.store, sqlstore.RetentionConfig{PublishedAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			state := func(want sqlstore.State) {
				t.Helper()
				if res := ret.RunOnce(ctx); res.Err != nil {
					t.Fatal(res.Err)
				}
				e, err := f.store.Entry(ctx, f.ids["o1"])
				if err != nil {
					t.Fatalf("replayed row after a retention pass: %v", err)
				}
				if e.State != want {
					t.Errorf("replayed row after a retention pass: %s, want %s", e.State, want)
				}
			}
			state(sqlstore.StatePending)

			b, err := f.store.Claim(ctx, relay.ClaimRequest{Owner: "replay-old", Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.store.Mark(ctx, b, relay.Outcome{Published: []int64{f.ids["o1"]}}); err != nil {
				t.Fatal(err)
			}
			if err := f.store.Release(ctx, "replay-old"); err != nil {
				t.Fatal(err)
			}
			state(sqlstore.StatePublished)
		})
	}
}
