package pgcdc_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// countingBroker acknowledges everything and counts it.
type countingBroker struct{ n chan int }

func (b countingBroker) Publish(_ string, msgs ...*message.Message) error {
	b.n <- len(msgs)
	return nil
}

func (countingBroker) Close() error { return nil }

// BenchmarkDrain drains a backlog of 20,000 events of 1,000 aggregates,
// written in transactions of 10, through a relay with the README's
// defaults and a broker that acknowledges at once: the polling relay
// (sqlstore.Store) and the CDC relay in each mode, on the same PostgreSQL,
// one after the other in one process. It reports events/s; the ratio of
// cdc to polling is the figure to compare.
func BenchmarkDrain(b *testing.B) {
	const events, perTx, aggregates = 20000, 10, 1000
	for _, kind := range []string{"polling", "cdc-table", "cdc-messages"} {
		b.Run(kind, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += drainOnce(b, kind, events, perTx, aggregates)
			}
			b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
		})
	}
}

// drainOnce writes the backlog, then times its drain.
func drainOnce(b *testing.B, kind string, events, perTx, aggregates int) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	mode := pgcdc.Table
	if kind == "cdc-messages" {
		mode = pgcdc.Messages
	}
	e := newEnv(b, mode)
	if kind != "polling" {
		if err := pgcdc.Setup(ctx, e.cfg); err != nil {
			b.Fatal(err)
		}
	}
	cfg := sqlstore.WriterConfig{}
	if mode == pgcdc.Messages && kind != "polling" {
		cfg.LogicalMessages = e.cfg.MessagePrefix
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < events; i += perTx {
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			rows := make([]sqlstore.Row, perTx)
			for j := range rows {
				env := event(fmt.Sprint((i+j)%aggregates), i+j)
				rows[j] = sqlstore.Row{Envelope: env, Topic: "orders"}
			}
			_, err := w.Write(ctx, pgxv5.Executor(tx), rows)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	store := openStore(b, e, kind)
	pub := countingBroker{n: make(chan int, 1024)}
	r, err := relay.New(store, pub, relay.Config{Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	go func() { done <- r.Run(rctx) }()
	for got := 0; got < events; {
		got += <-pub.n
	}
	took := time.Since(start)
	b.StopTimer()
	cancel()
	go func() {
		for range pub.n {
		}
	}()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return took
}

// stampBroker records when each message arrived.
type stampBroker struct {
	mu  sync.Mutex
	got map[string]time.Time
}

func (b *stampBroker) Publish(_ string, msgs ...*message.Message) error {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		if _, ok := b.got[m.UUID]; !ok {
			b.got[m.UUID] = now
		}
	}
	return nil
}

func (*stampBroker) Close() error { return nil }

func (b *stampBroker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.got)
}

// BenchmarkLatency measures commit → broker latency at 1,000 events/s (one
// event per transaction, 100 aggregates, 3 s), with the README's defaults:
// the polling relay (woken by LISTEN/NOTIFY) and the CDC relay in table
// mode, one after the other in one process. It reports p50 and p99 in ms.
func BenchmarkLatency(b *testing.B) {
	const rate, seconds, aggregates = 1000, 3, 100
	for _, kind := range []string{"polling", "cdc-table"} {
		b.Run(kind, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				lat = append(lat, latencyOnce(b, kind, rate, seconds, aggregates)...)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

func latencyOnce(b *testing.B, kind string, rate, seconds, aggregates int) []time.Duration {
	ctx := context.Background()
	e := newEnv(b, pgcdc.Table)
	store := openStore(b, e, kind)
	pub := &stampBroker{got: map[string]time.Time{}}
	r, err := relay.New(store, pub, relay.Config{Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	// Warm up: the relay is running and listening.
	time.Sleep(500 * time.Millisecond)
	committed := map[string]time.Time{}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range rate * seconds {
		<-tick.C
		ev := event(fmt.Sprint(i%aggregates), i)
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			_, err := w.Write(ctx, pgxv5.Executor(tx), []sqlstore.Row{{Envelope: ev, Topic: "orders"}})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		committed[ev.EventID.String()] = time.Now()
	}
	deadline := time.Now().Add(30 * time.Second)
	for pub.count() < len(committed) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling until the deadline
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	lat := make([]time.Duration, 0, len(committed))
	for id, at := range committed {
		got, ok := pub.got[id]
		if !ok {
			b.Fatalf("event %s not published within 30s", id)
		}
		lat = append(lat, max(0, got.Sub(at)))
	}
	return lat
}

// openStore opens the store of kind ("polling", or a CDC kind) on e,
// closed when b ends.
func openStore(b *testing.B, e *env, kind string) relay.Store {
	b.Helper()
	if kind == "polling" {
		s, err := sqlstore.NewStore(pgxv5.New(e.pool), sqlstore.StoreConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	s, err := pgcdc.Open(context.Background(), e.cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
