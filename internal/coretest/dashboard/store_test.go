package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite"  // the "sqlite" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/dashboard"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// openStore returns a store on a fresh, migrated outbox of dialect d.
func openStore(t testing.TB, d sqlstore.Dialect) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	driver, dsn := "sqlite", runtimetest.SQLiteDSN(filepath.Join(t.TempDir(), "outbox.db"))
	if d == sqlstore.Postgres {
		driver, dsn = "pgx", runtimetest.PostgresDSN(t)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: d, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	s, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, db
}

// seed writes n events, one per aggregate "agg-<i>" (topics "order" and
// "payment", event types alternating), in transactions of 1,000.
func seed(t testing.TB, db *sql.DB, d sqlstore.Dialect, n int) {
	t.Helper()
	w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	types := []string{"OrderPlaced", "OrderPaid", "OrderShipped"}
	for start := 0; start < n; start += 1000 {
		var rows []sqlstore.Row
		for i := start; i < min(n, start+1000); i++ {
			topic := "order"
			if i%5 == 0 {
				topic = "payment"
			}
			rows = append(rows, sqlstore.Row{Topic: topic, Envelope: runtime.Envelope{
				EventID: runtime.NewEventID(), EventType: types[i%3], EventVersion: 1,
				AggregateType: "order", AggregateID: fmt.Sprintf("agg-%d", i),
				OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
				Payload:    []byte(fmt.Sprintf(`{"order":"agg-%d","total":"%d.00","customer":"customer-%d"}`, i, i%300, i%977)),
				Headers:    map[string]string{"correlation_id": fmt.Sprintf("c-%d", i)},
			}})
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(ctx, databasesql.Executor(tx), rows); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// park parks every row whose id is a multiple of every, with lastError, as
// the relay does after a permanent failure.
func park(t testing.TB, db *sql.DB, d sqlstore.Dialect, every int, lastError string) {
	t.Helper()
	ph := func(i int) string {
		if d == sqlstore.Postgres {
			return fmt.Sprintf("$%d", i)
		}
		return "?"
	}
	_, err := db.Exec(`UPDATE `+sqlstore.DefaultTable+` SET attempts = 1, last_error = `+ph(1)+`, parked_at = `+ph(2)+
		` WHERE id % `+fmt.Sprint(every)+` = 0`, lastError, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
}

func TestRealStore(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			s, db := openStore(t, d)
			seed(t, db, d, 30)
			park(t, db, d, 10, hostile) // rows 10, 20, 30
			srv, c := serve(t, newHandler(t, s, dashboard.Config{AllowActions: true}), "/outbox")

			code, body, _ := get(t, c, srv.URL+"/outbox/")
			if code != http.StatusOK {
				t.Fatalf("overview: %d\n%s", code, body)
			}
			for _, want := range []string{`id="pending">27<`, `id="parked">3<`, `id="row-10"`, "payment", "OrderShipped"} {
				if !strings.Contains(body, want) {
					t.Errorf("overview lacks %q", want)
				}
			}
			if strings.Contains(body, "<script") {
				t.Errorf("unescaped last error on the overview")
			}

			e, err := s.Entry(context.Background(), 20)
			if err != nil {
				t.Fatal(err)
			}
			_, body, _ = get(t, c, srv.URL+"/outbox/events?q="+e.EventID.String())
			if !strings.Contains(body, `id="row-20"`) || strings.Count(body, `id="row-`) != 1 {
				t.Errorf("search by event id did not find exactly row 20")
			}
			_, body, _ = get(t, c, srv.URL+"/outbox/events?q=agg-19")
			if !strings.Contains(body, `id="row-20"`) {
				t.Errorf("search by aggregate agg-19 did not find row 20")
			}

			token := confirmToken(t, c, srv.URL+"/outbox", "retry", "20")
			resp := post(t, c, srv.URL+"/outbox/action", url.Values{"action": {"retry"}, "id": {"20"}, "token": {token}}, nil)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("retry: %d", resp.StatusCode)
			}
			if e, err = s.Entry(context.Background(), 20); err != nil || e.State != sqlstore.StatePending {
				t.Errorf("row 20 after retry: %v %v, want pending (Unpark resets attempts)", e.State, err)
			}
			token = confirmToken(t, c, srv.URL+"/outbox", "discard", "30")
			post(t, c, srv.URL+"/outbox/action", url.Values{"action": {"discard"}, "id": {"30"}, "token": {token}}, nil)
			st, err := s.Stats(context.Background())
			if err != nil || st.Parked != 1 || st.Pending != 28 {
				t.Errorf("stats after retry and discard: %+v %v, want 28 pending, 1 parked", st, err)
			}
		})
	}
}

// BenchmarkPages renders the overview and a list page over an outbox of
// 100,000 pending and 1,000 parked events on SQLite (and PostgreSQL when
// reachable), reporting the page size. The time per op is the whole
// request: the store's queries and rendering.
func BenchmarkPages(b *testing.B) {
	const n = 101_000
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.Postgres} {
		b.Run(fmt.Sprint(d), func(b *testing.B) {
			s, db := openStore(b, d)
			size := n
			if testing.Short() {
				size = 2_000
			}
			seed(b, db, d, size)
			park(b, db, d, 101, "publish order: broker said: message too large (1048576 bytes)")
			if d == sqlstore.Postgres {
				if _, err := db.Exec(`ANALYZE ` + sqlstore.DefaultTable); err != nil {
					b.Fatal(err)
				}
			}
			h, err := dashboard.New(s, dashboard.Config{AllowActions: true})
			if err != nil {
				b.Fatal(err)
			}
			// cold reads the counts on every view (as the first view after
			// Config.SampleInterval does); the others reuse the last sample.
			cold, err := dashboard.New(s, dashboard.Config{AllowActions: true, SampleInterval: time.Nanosecond})
			if err != nil {
				b.Fatal(err)
			}
			b.Run("overview-cold", func(b *testing.B) {
				var bytes int
				for b.Loop() {
					rec := httptest.NewRecorder()
					cold.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
					bytes = rec.Body.Len()
				}
				b.ReportMetric(float64(bytes), "page-bytes")
			})
			for _, pg := range []struct{ name, path string }{
				{"overview", "/"},
				{"parked-list", "/events?state=parked"},
				{"pending-list-after-half", fmt.Sprintf("/events?state=pending&after=%d", size/2)},
				{"search-aggregate", fmt.Sprintf("/events?q=agg-%d", size-1)},
				{"event", fmt.Sprintf("/event?id=%d", size/2+1)},
			} {
				p := pg.path
				b.Run(pg.name, func(b *testing.B) {
					// One view first: the counts are then the last sample's.
					h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
					var bytes int
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
						if rec.Code != http.StatusOK {
							b.Fatalf("GET %s: %d", p, rec.Code)
						}
						body, _ := io.ReadAll(rec.Body)
						bytes = len(body)
					}
					b.ReportMetric(float64(bytes), "page-bytes")
				})
			}
		})
	}
}
