package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/google/go-cmp/cmp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/amqp/amqptest"
	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// relayProc is an "outbox relay" run in this process, with its logs.
type relayProc struct {
	logs   runtimetest.LogBuffer
	cancel context.CancelFunc
	done   chan int
}

func startRelay(t *testing.T, args ...string) *relayProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &relayProc{cancel: cancel, done: make(chan int, 1)}
	e := &env{ctx: ctx, stdout: &p.logs, stderr: &p.logs, getenv: func(string) string { return "" }, openPublisher: openBroker}
	go func() { p.done <- e.run(append([]string{"relay"}, args...)) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop cancels the relay and waits for it to exit 0.
func (p *relayProc) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case code, ok := <-p.done:
		if ok && code != 0 {
			t.Errorf("relay exited %d:\n%s", code, p.logs.String())
		}
		close(p.done)
	case <-time.After(time.Minute):
		t.Errorf("relay still running a minute after it was told to stop:\n%s", p.logs.String())
	}
}

// waitLog polls until the relay has logged want.
func (p *relayProc) waitLog(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("relay did not log %q within %v:\n%s", want, within, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling for the outcome
	}
}

// TestRelayCutOffFromItsBrokerHandsOver: two "outbox relay" processes' worth
// of relays, with the defaults the README shows, publish one PostgreSQL
// outbox to RabbitMQ. The active one loses its network to RabbitMQ (every
// byte held, on open and new connections: a partition), not to its
// database, so it keeps renewing its leases. It hands its shards over, and
// the standby publishes every event written meanwhile, in order per
// aggregate. Before hand-overs, the standby waited for as long as the cut
// lasted.
func TestRelayCutOffFromItsBrokerHandsOver(t *testing.T) {
	t.Parallel()
	base := amqptest.URL(t)
	d := openTestDB(t, sqlstore.Postgres)
	topic := "outbox-handover-" + watermill.NewShortUUID()
	t.Cleanup(func() {
		if conn, err := amqp091.Dial(base); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(topic, false, false, false)
			}
			_ = conn.Close()
		}
	})
	host := strings.TrimSuffix(strings.TrimPrefix(base, "amqp://guest:guest@"), "/")
	proxy := runtimetest.StartProxy(t, host)
	cutURL := strings.Replace(base, host, proxy.Addr(), 1)

	// The consumer: RabbitMQ's queue for the topic, read in order.
	b, err := broker.Open(context.Background(), base, broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.Subscriber("test")
	if err != nil {
		t.Fatal(err)
	}
	subCtx, stopSub := context.WithCancel(context.Background())
	defer stopSub()
	var mu sync.Mutex
	got := map[string][]string{} // aggregate: event ids in arrival order, first copies
	seen := map[string]bool{}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	write := func(agg string) {
		t.Helper()
		env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: "orders.placed", EventVersion: 1, AggregateType: "order",
			AggregateID: agg, OccurredAt: time.Now().UTC(), Payload: []byte(`{}`)}
		if _, err := w.Write(context.Background(), databasesql.Executor(d.db), []sqlstore.Row{{Topic: topic, Envelope: env}}); err != nil {
			t.Fatal(err)
		}
		want[agg] = append(want[agg], env.EventID.String())
	}
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	// Relay a, through the proxy, publishes first and holds the shards.
	a := startRelay(t, "--db", d.url, "--broker", cutURL)
	write("warm-up")
	msgs, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range msgs {
			mu.Lock()
			if !seen[m.UUID] {
				seen[m.UUID] = true
				agg := m.Metadata.Get(runtime.MetadataAggregateID)
				got[agg] = append(got[agg], m.UUID)
			}
			mu.Unlock()
			m.Ack()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for received() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("relay a published nothing within 30s:\n%s", a.logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling for the outcome
	}
	// Relay b, straight to RabbitMQ, stands by.
	bRelay := startRelay(t, "--db", d.url, "--broker", base)
	bRelay.waitLog(t, "standing by", 30*time.Second)

	proxy.Pause() // a's network to RabbitMQ, both ways
	for i := range 60 {
		write(fmt.Sprint("agg-", i%6))
	}
	deadline = time.Now().Add(90 * time.Second)
	for received() < 61 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 61 events reached RabbitMQ within 90s of the cut\nrelay a:\n%s\nrelay b:\n%s", received(), a.logs.String(), bRelay.logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling for the outcome
	}
	mu.Lock()
	diff := cmp.Diff(want, got)
	mu.Unlock()
	if diff != "" {
		t.Errorf("events per aggregate, in arrival order (-written +received):\n%s", diff)
	}
	if l := a.logs.String(); !strings.Contains(l, "handed its shards over") {
		t.Errorf("relay a did not log its hand-over:\n%s", l)
	}
	if l := bRelay.logs.String(); !strings.Contains(l, fmt.Sprintf("shards=%d", sqlstore.Shards)) {
		t.Errorf("relay b did not log taking the shards over:\n%s", l)
	}
	// Relay a's connections end with the proxy's, so that it stops
	// promptly.
	proxy.Refuse()
	proxy.Resume()
}
