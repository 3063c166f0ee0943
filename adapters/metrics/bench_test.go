package metrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gooutbox/outbox/adapters/metrics"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// nopPublisher acknowledges every message at once: the relay's own cost is
// then all there is, and the metrics' share of it is the largest.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }

// benchMessages returns n outbox messages over 4 topics, 5 event types and
// 1,000 aggregates, with 236-byte payloads.
func benchMessages(n int) []runtime.OutboxMessage {
	payload := make([]byte, 236)
	for i := range payload {
		payload[i] = 'x'
	}
	payload[0], payload[len(payload)-1] = '"', '"'
	msgs := make([]runtime.OutboxMessage, n)
	now := time.Now()
	for i := range msgs {
		msgs[i] = runtime.OutboxMessage{
			Topic: fmt.Sprintf("topic-%d", i%4),
			Envelope: runtime.Envelope{
				EventID: uuid.Must(uuid.NewV7()), EventType: fmt.Sprintf("orders.event_%d", i%5), EventVersion: 1,
				AggregateType: "order", AggregateID: fmt.Sprint(i % 1000), OccurredAt: now, Payload: payload,
			},
		}
	}
	return msgs
}

// drain runs a relay on store until n messages are published and returns
// how long that took; with metrics on, its OnBatch feeds a registered
// Metrics.
func drain(b *testing.B, store relay.Store, n int, withMetrics bool) time.Duration {
	b.Helper()
	var published atomic.Int64
	done := make(chan struct{})
	count := func(res relay.BatchResult) {
		if published.Add(int64(res.Published)) == int64(n) {
			close(done)
		}
	}
	onBatch := count
	if withMetrics {
		m, err := metrics.New(metrics.Config{Store: statsOf(store)})
		if err != nil {
			b.Fatal(err)
		}
		prometheus.NewRegistry().MustRegister(m)
		onBatch = func(res relay.BatchResult) {
			m.ObserveBatch(res)
			count(res)
		}
	}
	r, err := relay.New(store, nopPublisher{}, relay.Config{PollInterval: time.Hour, OnBatch: onBatch, Logger: discard()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { _ = r.Run(ctx) })
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("published %d of %d", published.Load(), n)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return elapsed
}

func statsOf(store relay.Store) metrics.StatsSource {
	s, _ := store.(metrics.StatsSource)
	return s
}

// BenchmarkRelayMetrics drains an outbox with the relay, metrics off and
// on alternately in each iteration (the order swapping every iteration),
// into a publisher that acknowledges at once, and reports both rates (the
// medians of the drains) and the overhead. memory: runtimetest.MemoryStore, the relay's cost alone;
// sqlite: sqlstore.Store on a SQLite file, a real store.
//
//	go test -run '^$' -bench RelayMetrics -benchtime 3x ./adapters/metrics/
func BenchmarkRelayMetrics(b *testing.B) {
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	msgs := benchMessages(n)
	stores := []struct {
		name string
		fill func(b *testing.B) relay.Store
	}{
		{"memory", func(*testing.B) relay.Store {
			s := &runtimetest.MemoryStore{}
			s.Add(msgs...)
			return s
		}},
		{"sqlite", func(b *testing.B) relay.Store { return sqliteStore(b, msgs) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			var off, on []float64       // events/s of each drain
			var offCPU, onCPU []float64 // CPU time per event of each drain, µs
			i := 0
			for b.Loop() {
				for k := range 2 {
					withMetrics := (i+k)%2 == 1
					b.StopTimer()
					store := st.fill(b)
					goruntime.GC() // each drain starts with the same heap
					b.StartTimer()
					cpu0 := cpuTime(b)
					rate := float64(n) / drain(b, store, n, withMetrics).Seconds()
					cpu := float64((cpuTime(b) - cpu0).Microseconds()) / float64(n)
					if withMetrics {
						on, onCPU = append(on, rate), append(onCPU, cpu)
					} else {
						off, offCPU = append(off, rate), append(offCPU, cpu)
					}
				}
				i++
			}
			offRate, onRate := median(off), median(on)
			b.ReportMetric(offRate, "off_events/s")
			b.ReportMetric(onRate, "on_events/s")
			b.ReportMetric(100*(offRate-onRate)/offRate, "overhead_%")
			offC, onC := median(offCPU), median(onCPU)
			b.ReportMetric(offC, "off_cpu_µs/event")
			b.ReportMetric(onC, "on_cpu_µs/event")
			b.ReportMetric(100*(onC-offC)/offC, "cpu_overhead_%")
		})
	}
}

// median returns the median of xs.
func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// sqliteStore returns a sqlstore.Store on a new SQLite file holding msgs.
func sqliteStore(b *testing.B, msgs []runtime.OutboxMessage) relay.Store {
	b.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "outbox.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.SQLite, Outbox: true}); err != nil {
		b.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.SQLite, "", sqlstore.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for len(msgs) > 0 {
		k := min(len(msgs), 1000)
		rows := make([]sqlstore.Row, k)
		for i, m := range msgs[:k] {
			rows[i] = sqlstore.Row{Envelope: m.Envelope, Topic: m.Topic}
		}
		msgs = msgs[k:]
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Write(ctx, databasesql.Executor(tx), rows); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{Dialect: sqlstore.SQLite})
	if err != nil {
		b.Fatal(err)
	}
	return store
}

// BenchmarkObserveBatch is the metrics' cost per batch of 1,000 published
// messages over 4 topics and 5 event types.
func BenchmarkObserveBatch(b *testing.B) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	prometheus.NewRegistry().MustRegister(m)
	msgs := benchMessages(1000)
	now := time.Now()
	for i := range msgs {
		msgs[i].ID, msgs[i].CreatedAt = int64(i+1), now.Add(-time.Duration(i)*time.Millisecond)
	}
	res := relay.BatchResult{Claimed: 1000, Published: 1000, Messages: msgs, Duration: 5 * time.Millisecond, PublishDuration: 3 * time.Millisecond, PublishedAt: now}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveBatch(res)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/message")
}
