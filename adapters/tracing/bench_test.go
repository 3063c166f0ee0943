package tracing_test

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/tracing"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// discardPublisher acknowledges every message at once: what is measured is
// the relay (and the tracing decorator), not a broker.
type discardPublisher struct{}

func (discardPublisher) Publish(string, ...*message.Message) error { return nil }
func (discardPublisher) Close() error                              { return nil }

// benchTracer returns a Tracer as production would set one up: the SDK with
// a batching span processor, here exporting to nowhere, and sampler.
func benchTracer(b *testing.B, sampler sdktrace.Sampler) (*tracing.Tracer, trace.TracerProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := tracing.New(tracing.Config{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	return tr, tp
}

// BenchmarkRelayTracing measures relay throughput with the tracing
// publisher decorator off, on (every send span sampled) and on with 1 % of
// the send spans sampled, taking turns within each iteration, and reports
// each rate and the ratios to "off": every event carries a traceparent (as
// a traced save writes it) in all modes. "memory" is the
// in-memory store, where the relay itself is the whole cost (the decorator's
// share is largest there); "postgres" is the SQL store on the local
// PostgreSQL (skipped when it does not answer).
//
//	go test -run '^$' -bench RelayTracing -benchtime 3x ./adapters/tracing/
func BenchmarkRelayTracing(b *testing.B) {
	events := 50_000
	if testing.Short() { // CI's smoke run
		events = 2_000
	}
	tr, tp := benchTracer(b, sdktrace.AlwaysSample())
	sampled, _ := benchTracer(b, sdktrace.TraceIDRatioBased(0.01))
	ctx, span := tp.Tracer("app").Start(context.Background(), "save")
	span.End()
	headers := map[string]string{}
	tr.Headers(ctx, headers)

	outer := b
	for _, storeName := range []string{"memory", "postgres"} {
		var (
			fill     func(b *testing.B)
			newStore func(b *testing.B) relay.Store
		)
		switch storeName {
		case "memory":
			var ms *runtimetest.MemoryStore
			fill = func(b *testing.B) {
				ms = &runtimetest.MemoryStore{}
				msgs := make([]runtime.OutboxMessage, events)
				for i := range msgs {
					env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(),
						OrderPlaced{EventVersion: 1, OccurredAt: time.Now().UTC(), Amount: float64(i)}, "order", strconv.Itoa(i%1000))
					if err != nil {
						b.Fatal(err)
					}
					env.Headers = headers
					msgs[i] = runtime.OutboxMessage{Topic: "order", Envelope: env}
				}
				ms.Add(msgs...)
			}
			newStore = func(*testing.B) relay.Store { return ms }
		case "postgres":
			var db *gorm.DB
			var plugin *hooks.Plugin
			fill = func(b *testing.B) {
				if db == nil { // for the whole benchmark, not one sub-benchmark
					db = hookstest.Postgres(outer, nil)
					if err := hooks.Migrate(ctx, db, ""); err != nil {
						b.Fatal(err)
					}
					var err error
					if plugin, err = hooks.New(hooks.Config{Headers: tr.Headers}); err != nil {
						b.Fatal(err)
					}
				}
				// Every run starts from the same table: the runs before
				// left published rows, which would slow the later runs.
				if err := db.Exec(`DELETE FROM ` + sqlstore.DefaultTable).Error; err != nil {
					b.Fatal(err)
				}
				for start := 0; start < events; start += 1000 {
					err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
						for i := start; i < min(start+1000, events); i++ {
							_, err := plugin.Enqueue(tx, "order", strconv.Itoa(i%1000), OrderPlaced{EventVersion: 1, OccurredAt: time.Now().UTC(), Amount: float64(i)})
							if err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				db.Exec(`VACUUM ANALYZE ` + sqlstore.DefaultTable)
			}
			newStore = func(b *testing.B) relay.Store {
				sqlDB, err := db.DB()
				if err != nil {
					b.Fatal(err)
				}
				s, err := sqlstore.NewStore(databasesql.New(sqlDB), sqlstore.StoreConfig{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				return s
			}
		}
		b.Run(storeName, func(b *testing.B) {
			// The modes take turns within each iteration, so a change in
			// the machine's load touches all of them alike.
			modes := []struct {
				name string
				pub  message.Publisher
			}{
				{"off", discardPublisher{}},
				{"on", tr.Publisher(discardPublisher{})},
				{"on-sampled-1%", sampled.Publisher(discardPublisher{})},
			}
			totals := make([]time.Duration, len(modes))
			for b.Loop() {
				for i, m := range modes {
					b.StopTimer()
					fill(b)
					store := newStore(b)
					b.StartTimer()
					totals[i] += drain(b, store, m.pub, events)
				}
			}
			for i, m := range modes {
				b.ReportMetric(float64(events*b.N)/totals[i].Seconds(), "events/s-tracing-"+m.name)
			}
			b.ReportMetric(totals[0].Seconds()/totals[1].Seconds(), "on/off")
			b.ReportMetric(totals[0].Seconds()/totals[2].Seconds(), "on-sampled-1%/off")
		})
	}
}

// drain runs a relay on store until it has published n events, and returns
// how long that took.
func drain(b *testing.B, store relay.Store, pub message.Publisher, n int) time.Duration {
	var published atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	r, err := relay.New(store, pub, relay.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnBatch: func(res relay.BatchResult) {
			if published.Add(int64(res.Published)) >= int64(n) {
				once.Do(func() { close(done) })
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	began := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("published %d of %d events in 5 minutes", published.Load(), n)
	}
	took := time.Since(began)
	cancel()
	wg.Wait()
	return took
}

// BenchmarkSaveTracing measures a GORM save of an aggregate with one event
// on the local PostgreSQL, under a span, with hooks.Config.Headers unset and
// set to [tracing.Tracer.Headers]: each iteration saves once in each of two
// schemas, one per setting, and the time of each is reported.
//
//	go test -run '^$' -bench SaveTracing -benchtime 2000x ./adapters/tracing/
func BenchmarkSaveTracing(b *testing.B) {
	tr, tp := benchTracer(b, sdktrace.AlwaysSample())
	ctx, span := tp.Tracer("app").Start(context.Background(), "request")
	defer span.End()
	open := func(headers func(context.Context, map[string]string)) *gorm.DB {
		db := hookstest.Postgres(b, nil)
		if err := hooks.Migrate(ctx, db, ""); err != nil {
			b.Fatal(err)
		}
		if err := db.AutoMigrate(&Order{}); err != nil {
			b.Fatal(err)
		}
		plugin, err := hooks.New(hooks.Config{Headers: headers})
		if err != nil {
			b.Fatal(err)
		}
		if err := db.Use(plugin); err != nil {
			b.Fatal(err)
		}
		return db.WithContext(ctx)
	}
	dbs := []*gorm.DB{open(nil), open(tr.Headers)}
	totals := make([]time.Duration, len(dbs))
	for b.Loop() {
		for i, db := range dbs {
			o := &Order{}
			o.Place(1)
			began := time.Now()
			if err := db.Create(o).Error; err != nil {
				b.Fatal(err)
			}
			totals[i] += time.Since(began)
		}
	}
	b.ReportMetric(float64(totals[0].Microseconds())/float64(b.N), "µs/save-tracing-off")
	b.ReportMetric(float64(totals[1].Microseconds())/float64(b.N), "µs/save-tracing-on")
	b.ReportMetric(totals[0].Seconds()/totals[1].Seconds(), "on/off")
}
