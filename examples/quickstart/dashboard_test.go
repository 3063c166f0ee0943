package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/chromedp"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/examples/internal/browser"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/dashboard"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// flakyBroker stands for a broker that refuses some messages: while
// refusing is set, it rejects for good every message whose payload
// contains "oversized" (as a broker rejects a message over its size limit)
// and fails for now every message of topic "invoice" (as during an outage
// of its partition leader). The rest go to the in-memory broker.
type flakyBroker struct {
	message.Publisher
	refusing atomic.Bool
}

func (b *flakyBroker) Publish(topic string, msgs ...*message.Message) error {
	if !b.refusing.Load() {
		return b.Publisher.Publish(topic, msgs...)
	}
	errs := make(runtime.PublishErrors, len(msgs))
	failed := false
	blocked := map[string]bool{} // aggregates with a failed message in this call
	for i, m := range msgs {
		agg := m.Metadata.Get(runtime.MetadataAggregateID)
		switch {
		case blocked[agg]:
			errs[i] = errors.New("not sent: an earlier message of its aggregate failed")
		case bytes.Contains(m.Payload, []byte("oversized")):
			errs[i] = runtime.Permanent(fmt.Errorf(`broker refused message %s: size %d > max.message.bytes <1048576>`, m.UUID, 1<<21))
		case topic == "invoice":
			errs[i] = errors.New("broker: NOT_LEADER_FOR_PARTITION (invoice-0)")
		default:
			errs[i] = b.Publisher.Publish(topic, m)
		}
		if errs[i] != nil {
			failed, blocked[agg] = true, true
		}
	}
	if failed {
		return errs
	}
	return nil
}

// TestDashboardInBrowser drives the dashboard in headless Chromium: an
// outbox on SQLite with a real relay publishing to the in-memory broker;
// one event is parked by the broker, the operator finds it on the
// dashboard (mounted under /outbox), retries it, confirms, and sees it
// published.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser.New(t)

	db, err := sql.Open("sqlite", hookstest.SQLiteDSN(filepath.Join(t.TempDir(), "outbox.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := sqlstore.Migrate(context.Background(), databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.SQLite, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	// 40 orders with 3 events each, 6 invoices; order 17's payment is
	// oversized.
	var rows []sqlstore.Row
	for i := 1; i <= 40; i++ {
		for _, typ := range []string{"OrderPlaced", "OrderPaid", "OrderShipped"} {
			payload := fmt.Sprintf(`{"order":"%d","total":"%d.00"}`, i, 10*i)
			if i == 17 && typ == "OrderPaid" {
				payload = `{"order":"17","note":"oversized <b>attachment</b>"}`
			}
			rows = append(rows, row("order", typ, "order", fmt.Sprint(i), payload))
		}
	}
	for i := 1; i <= 6; i++ {
		rows = append(rows, row("invoice", "InvoiceIssued", "invoice", fmt.Sprintf("inv-%d", i), `{"amount":"12.00"}`))
	}
	w, err := sqlstore.NewWriter(sqlstore.SQLite, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(context.Background(), databasesql.Executor(db), rows); err != nil {
		t.Fatal(err)
	}

	mem, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	broker := &flakyBroker{Publisher: mem}
	broker.refusing.Store(true)

	dash, err := dashboard.New(store, dashboard.Config{AllowActions: true, SampleInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := relay.New(store, broker, relay.Config{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { _ = dash.Run(runCtx) })
	wg.Go(func() {
		if err := rl.Run(runCtx); err != nil {
			t.Errorf("relay: %v", err)
		}
	})

	// The relay publishes what it can and parks the oversized event; the
	// invoices wait for the broker, and order 17's OrderShipped for its
	// parked OrderPaid.
	st := waitStats(t, store, func(st relay.Stats) bool { return st.Parked == 1 && st.Pending == 7 && st.Retrying >= 6 })
	t.Logf("before the retry: %+v", st)
	parked, err := store.Entries(context.Background(), sqlstore.Query{State: sqlstore.StateParked})
	if err != nil || len(parked) != 1 {
		t.Fatalf("parked entries: %v %v", parked, err)
	}
	id := parked[0].ID

	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", dash))
	mux.Handle("/outbox", http.StripPrefix("/outbox", dash))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		defer scancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}

	// The overview (reached through the redirect that adds the slash).
	step("load the overview", chromedp.Navigate(srv.URL+"/outbox"), chromedp.WaitVisible(chromedp.CSS("#parked")))
	if got := text("#parked"); got != "1" {
		t.Errorf("parked count on the page = %q, want 1", got)
	}
	if got := text("#pending"); got != "7" {
		t.Errorf("pending count on the page = %q, want 7", got)
	}
	if got := text("#groups"); !strings.Contains(got, "invoice") || !strings.Contains(got, "OrderPaid") {
		t.Errorf("per-topic table lacks invoice or OrderPaid:\n%s", got)
	}
	rowSel := fmt.Sprintf("#row-%d", id)
	if got := text(rowSel); !strings.Contains(got, "max.message.bytes <1048576>") {
		t.Errorf("parked row does not show its last error (escaped as text): %q", got)
	}
	if path := os.Getenv("OUTBOX_DASHBOARD_SCREENSHOT"); path != "" {
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		scancel()
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}

	// The operator raised the broker's limit; now retry the event.
	broker.refusing.Store(false)
	step("click retry", chromedp.Click(chromedp.CSS(rowSel+" a.retry")), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); !strings.Contains(loc, "/outbox/confirm?") {
		t.Errorf("confirmation page at %s, want under /outbox/", loc)
	}
	step("confirm", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#done")))
	if got := text("#done"); !strings.HasPrefix(got, "Retried") {
		t.Errorf("after confirming: %q", got)
	}

	// The relay publishes it: reload the event's page until it says so.
	deadline := time.Now().Add(20 * time.Second)
	for {
		state := text("#state")
		if state == "published" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %d still %s on its page after 20s", id, state)
		}
		step("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#state")))
	}
	// Order 17's OrderShipped, held back behind it, follows.
	waitStats(t, store, func(relay.Stats) bool {
		held, err := store.Entries(context.Background(), sqlstore.Query{State: sqlstore.StatePending, AggregateID: "17"})
		return err == nil && len(held) == 0
	})
	step("back to the overview", chromedp.Navigate(srv.URL+"/outbox/"), chromedp.WaitVisible(chromedp.CSS("#parked")))
	if got := text("#parked"); got != "0" {
		t.Errorf("parked count after the retry = %q, want 0", got)
	}
}

func row(topic, eventType, aggType, aggID, payload string) sqlstore.Row {
	return sqlstore.Row{Topic: topic, Envelope: runtime.Envelope{
		EventID: runtime.NewEventID(), EventType: eventType, EventVersion: 1,
		AggregateType: aggType, AggregateID: aggID,
		OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
		Payload:    []byte(payload),
	}}
}

// waitStats polls the store's Stats until ok holds, failing after 20s.
func waitStats(t *testing.T, s *sqlstore.Store, ok func(relay.Stats) bool) relay.Stats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := s.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats still %+v after 20s", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
