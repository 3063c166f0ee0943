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
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pr, pw := io.Pipe()
		var errOut strings.Builder
		e := &env{ctx: ctx, stdout: pw, stderr: &errOut, getenv: func(string) string { return "" },
			openPublisher: func(context.Context, string, *slog.Logger) (message.Publisher, func() error, error) {
				return nil, nil, nil
			}}
		codec := make(chan int, 1)
		go func() {
			code := e.run([]string{"dashboard", "--db", d.url, "--addr", "127.0.0.1:0"})
			pw.Close()
			codec <- code
		}()
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil {
			t.Fatalf("no address printed (exit %d): %v\n%s", <-codec, err, errOut.String())
		}
		go io.Copy(io.Discard, pr)
		base := strings.TrimSpace(strings.TrimPrefix(line, "dashboard: "))
		resp, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="pending">3<`) || !strings.Contains(string(body), "read-only") {
			t.Errorf("GET %s: %d, want the read-only overview with 3 pending:\n%s", base, resp.StatusCode, body)
		}
		cancel()
		if code := <-codec; code != exitOK {
			t.Errorf("dashboard exited %d after the interrupt; stderr:\n%s", code, errOut.String())
		}
	})
}
