package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/health"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestRun writes two events to the outbox, and checks what the endpoints
// serve once the relay has published them.
func TestRun(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "monitor.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.SQLite, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.SQLite, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []sqlstore.Row
	for _, id := range []string{"A-1", "A-2"} {
		rows = append(rows, sqlstore.Row{Topic: "orders", Envelope: runtime.Envelope{
			EventID: uuid.Must(uuid.NewV7()), EventType: "orders.order_placed", EventVersion: 1,
			AggregateType: "order", AggregateID: id, OccurredAt: time.Now(), Payload: []byte(`{"event_version":1}`),
		}})
	}
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, db, ln) }()
	base := "http://" + ln.Addr().String()

	// The relay publishes both events: the counter says so (the first
	// scrapes may come before the server or the relay is up).
	const want = `outbox_relay_published_total{event_type="orders.order_placed",topic="orders"} 2`
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := get(t, base+"/metrics")
		if strings.Contains(body, want) {
			// The gauges are cached for 5s: an earlier scrape may
			// have seen the events pending.
			if !strings.Contains(body, "\noutbox_pending_messages ") || !strings.Contains(body, "\noutbox_stats_up 1\n") {
				t.Errorf("metrics lack the backlog gauges:\n%s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never said %s:\n%s", want, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for path, checks := range map[string]int{"/livez": 1, "/readyz": 3} {
		code, body := get(t, base+path)
		var rep health.Report
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("%s: %v: %s", path, err, body)
		}
		if code != http.StatusOK || rep.Status != health.StatusOK || len(rep.Checks) != checks {
			t.Errorf("%s = %d %s, want 200 with %d checks ok", path, code, body, checks)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run = %v", err)
	}
}

// get returns the status and body of a GET of url, or 0 when the server is
// not listening yet.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
