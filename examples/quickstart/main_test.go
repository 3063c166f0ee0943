package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/hooks/hookstest"
)

var summaryRE = regexp.MustCompile(`(?m)^committed (\d+), published (\d+), rolled back (\d+), ghosts 0, pending in outbox 0$`)

// TestQuickstart runs the quickstart as a user would, on its embedded
// defaults and on PostgreSQL.
func TestQuickstart(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"sqlite", func(*testing.T) []string { return []string{"-orders", "12"} }},
		{"postgres", func(t *testing.T) []string {
			return []string{"-orders", "12", "-database-url", hookstest.PostgresDSN(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(context.Background(), tc.args(t), &out, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			got := out.String()
			m := summaryRE.FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("no summary line in output:\n%s", got)
			}
			// 12 orders placed, 12 payments of which every third (4) rolled back.
			if m[1] != "20" || m[2] != "20" || m[3] != "4" {
				t.Errorf("summary %q, want committed 20, published 20, rolled back 4", m[0])
			}
			if !strings.HasSuffix(got, m[0]+"\n") {
				t.Errorf("the summary is not the last line:\n%s", got)
			}
			for _, want := range []string{
				"shipments 8 (one per paid order)",
				// Order 4 is paid through the old checkout (v1) and
				// consumed upcast to v2 with the default channel.
				"consumed orders.order_paid v1  order 4   method=card amount=none channel=web (as v2)",
				"consumed orders.order_paid v2  order 5   method=card amount=50.00 channel=web (as v2)",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			// Order 3's payment was declined: its OrderPaid never reaches the consumer.
			if strings.Contains(got, "order_paid v2  order 3 ") {
				t.Errorf("the rolled-back payment of order 3 was consumed:\n%s", got)
			}
		})
	}
}

// lineWriter collects output and reports the first line containing a
// prefix on a channel.
type lineWriter struct {
	syncWriter
	buf    bytes.Buffer
	prefix string
	found  chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for line := range strings.Lines(string(p)) {
		if strings.HasPrefix(line, w.prefix) {
			select {
			case w.found <- strings.TrimSpace(strings.TrimPrefix(line, w.prefix)):
			default:
			}
		}
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestQuickstartDashboard runs the quickstart with -dashboard on its
// embedded defaults, reads the dashboard while it places orders, then
// interrupts it: it still ends with a summary that keeps the promise.
func TestQuickstartDashboard(t *testing.T) {
	out := &lineWriter{prefix: "dashboard: ", found: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-orders", "3", "-dashboard", "127.0.0.1:0", "-dashboard-every", "20ms"}, out, out)
	}()
	var base string
	select {
	case base = <-out.found:
	case err := <-errc:
		t.Fatalf("run ended before serving the dashboard: %v\n%s", err, out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("no dashboard line within 60s:\n%s", out.String())
	}
	get := func(u string) string {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, b)
		}
		return string(b)
	}
	if body := get(base); !strings.Contains(body, `id="pending"`) || !strings.Contains(body, "read-only") {
		t.Errorf("overview is not the read-only dashboard:\n%s", body)
	}
	// Real data: published events of the quickstart's orders, more of them
	// as orders keep coming.
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := get(base + "events?state=published&aggregate=5")
		if strings.Contains(body, "orders.order_placed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order 5 (placed after the first 3, while serving) never shows as published:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("run after interrupt: %v\n%s", err, out.String())
	}
	if summaryRE.FindString(out.String()) == "" {
		t.Errorf("no summary line after the interrupt:\n%s", out.String())
	}
}
