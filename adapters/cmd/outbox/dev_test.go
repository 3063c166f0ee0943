package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime/health"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestDev: outbox dev serves Kafka on the port asked for and prints its
// broker URL (--json), which a relay's broker.Open takes and pings, until
// the command's context ends; then the port is free again.
func TestDev(t *testing.T) {
	t.Parallel()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut runtimetest.LogBuffer
	e := &env{ctx: ctx, stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }, openPublisher: openBroker}
	done := make(chan int, 1)
	go func() { done <- e.run([]string{"dev", "--port", port, "--json"}) }()
	var printed struct {
		Brokers   []string `json:"brokers"`
		BrokerURL string   `json:"broker_url"`
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "\n"); {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("dev printed nothing within 10s; exit %d, stderr: %s", <-done, errOut.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the output
	}
	if err := json.Unmarshal([]byte(out.String()), &printed); err != nil || printed.BrokerURL != "kafka://127.0.0.1:"+port {
		t.Fatalf("dev --json printed %q (%v), want broker_url kafka://127.0.0.1:%s", out.String(), err, port)
	}
	b, err := broker.Open(ctx, printed.BrokerURL, broker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	err = b.Publisher().(health.BrokerPinger).Ping(pctx)
	pcancel()
	b.Close()
	if err != nil {
		t.Fatalf("Ping %s: %v", printed.BrokerURL, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("dev: exit %d: %s", code, errOut.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("port %s still taken after dev stopped: %v", port, err)
	}
	ln.Close()
}
