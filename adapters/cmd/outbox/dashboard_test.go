package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// TestDashboard serves the dashboard on each database, reads its overview
// and stops it with the context, as SIGINT does.
func TestDashboard(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		d.write(t, "a1", "a2", "p3")
		base, stop := startDashboard(t, "--db", d.url)
		body := getPage(t, base)
		if !strings.Contains(body, `id="pending">3<`) || !strings.Contains(body, "read-only") {
			t.Errorf("GET %s: want the read-only overview with 3 pending:\n%s", base, body)
		}
		stop()

		// With --dead-letters, the consumers' dead letters per consumer.
		if code, _, stderr := runCmd(t, nil, "migrate", "--dead-letters", "--db", d.url); code != 0 {
			t.Fatalf("migrate --dead-letters: exit %d: %s", code, stderr)
		}
		d.deadLetter(t, "billing", "payments", "payments.made", "ledger refuses currency XYZ")
		base, stop = startDashboard(t, "--db", d.url, "--dead-letters")
		body = getPage(t, base)
		if !strings.Contains(body, `id="dead-letters"`) || !strings.Contains(body, "outbox deadletters list --consumer billing") {
			t.Errorf("GET %s with --dead-letters: want billing's dead letter:\n%s", base, body)
		}
		stop()
	})
}

// startDashboard runs outbox dashboard with args on a free port and
// returns its address; stop interrupts it and checks that it exits 0.
func startDashboard(t *testing.T, args ...string) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	var errOut strings.Builder
	e := &env{ctx: ctx, stdout: pw, stderr: &errOut, getenv: func(string) string { return "" },
		openPublisher: func(context.Context, string, *slog.Logger) (message.Publisher, func() error, error) {
			return nil, nil, nil
		}}
	codec := make(chan int, 1)
	go func() {
		code := e.run(append([]string{"dashboard", "--addr", "127.0.0.1:0"}, args...))
		pw.Close()
		codec <- code
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed (exit %d): %v\n%s", <-codec, err, errOut.String())
	}
	go io.Copy(io.Discard, pr)
	return strings.TrimSpace(strings.TrimPrefix(line, "dashboard: ")), func() {
		t.Helper()
		cancel()
		if code := <-codec; code != exitOK {
			t.Errorf("dashboard exited %d after the interrupt; stderr:\n%s", code, errOut.String())
		}
	}
}

// getPage returns the body of a GET of u, failing the test unless it is
// 200 OK.
func getPage(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, body)
	}
	return string(body)
}
