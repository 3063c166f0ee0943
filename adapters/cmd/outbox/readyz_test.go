package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestReadyzFollowsTheBroker: a relay pointed at a port where no broker
// listens (kafka:// opens without dialling) waits for it, pinging it, and
// is not ready, its /readyz saying that it waits for the broker; once a
// broker listens on that port, it starts and is ready.
func TestReadyzFollowsTheBroker(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	brokerAddr := freeAddr(t)
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	var errOut runtimetest.LogBuffer // read while the relay writes it
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"relay", "--db", d.url, "--broker", "kafka://" + brokerAddr, "--listen", addr}, &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("relay: exit %d: %s", code, errOut.String())
		}
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Not ready, for the broker: it has not started.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for the database and the broker") && strings.Contains(errOut.String(), "cannot reach the broker") {
			break
		}
		if code == http.StatusOK {
			t.Fatalf("/readyz = 200 with no broker at %s: %s", brokerAddr, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: /readyz %d %s; want 503 while it waits for the broker", code, body)
		}
		time.Sleep(20 * time.Millisecond) // polling the endpoint
	}
	if code, body := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d %s, want 200: a restart does not cure a broker outage", code, body)
	}

	_, port, _ := net.SplitHostPort(brokerAddr)
	p, _ := strconv.Atoi(port)
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s with a broker at %s: /readyz %d %s; want 200", brokerAddr, code, body)
		}
		time.Sleep(20 * time.Millisecond) // polling the endpoint
	}
}
