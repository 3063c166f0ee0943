package hooks_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// benchDB opens a fresh database of dialect, "postgres" or "mysql".
func benchDB(b *testing.B, dialect string) *gorm.DB {
	b.Helper()
	switch dialect {
	case "mysql":
		return hookstest.MariaDB(b, nil)
	case "sqlite":
		return hookstest.SQLite(b, nil)
	}
	return hookstest.Postgres(b, nil)
}

// BenchmarkCreate measures what the plugin adds to a GORM Create on
// PostgreSQL and MySQL/MariaDB: the same Create of one order, without events
// and without the plugin ("plain"), and with one recorded event written to
// the outbox in the same transaction ("outbox").
//
//	go test -run '^$' -bench Create -benchmem ./internal/coretest/hooks/
func BenchmarkCreate(b *testing.B) {
	for _, c := range []struct {
		dialect    string
		withPlugin bool
	}{{"postgres", false}, {"postgres", true}, {"mysql", false}, {"mysql", true}} {
		withPlugin := c.withPlugin
		name := c.dialect + "/plain"
		if withPlugin {
			name = c.dialect + "/outbox"
		}
		b.Run(name, func(b *testing.B) {
			db := benchDB(b, c.dialect)
			if err := hooks.Migrate(context.Background(), db, ""); err != nil {
				b.Fatal(err)
			}
			if err := db.AutoMigrate(&Order{}); err != nil {
				b.Fatal(err)
			}
			if withPlugin {
				p, err := hooks.New(hooks.Config{})
				if err != nil {
					b.Fatal(err)
				}
				if err := db.Use(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				o := &Order{Status: "placed"}
				if withPlugin {
					o.Record(OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: 9.5})
				}
				if err := db.Create(o).Error; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaim measures a store claim and mark of 1,000 rows, and of 4 rows
// with the relay's default limit of 1,000 (a relay at a low rate), on
// PostgreSQL and MySQL/MariaDB, with a publish function that accepts
// everything: the relay's database cost per batch, and its garbage.
//
//	go test -run '^$' -bench Claim -benchmem ./internal/coretest/hooks/
func BenchmarkClaim(b *testing.B) {
	for _, dialect := range []string{"postgres", "mysql"} {
		for _, rows := range []int{1000, 4} {
			b.Run(fmt.Sprintf("%s/rows=%d", dialect, rows), func(b *testing.B) { benchmarkClaim(b, dialect, rows) })
		}
	}
}

func benchmarkClaim(b *testing.B, dialect string, rows int) {
	db := benchDB(b, dialect)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		b.Fatal(err)
	}
	p, err := hooks.New(hooks.Config{})
	if err != nil {
		b.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(sqlDBOf(b, db)), sqlstore.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	fill := func() {
		err := db.Transaction(func(tx *gorm.DB) error {
			for i := range rows {
				if _, err := p.Enqueue(tx, "order", string(rune('a'+i%26)), OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: float64(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		fill()
		b.StartTimer()
		batch, err := store.Claim(ctx, relay.ClaimRequest{Owner: "bench", Limit: 1000})
		if err != nil || len(batch.Messages) != rows {
			b.Fatalf("Claim = %d messages, %v; want %d", len(batch.Messages), err, rows)
		}
		if err := store.Mark(ctx, batch, relay.Outcome{Published: ids(batch.Messages)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveConcurrent measures what commit order costs writers: 8
// goroutines each saving new orders with one event through the hooks on
// PostgreSQL and MySQL/MariaDB, with the per-aggregate commit-order locks
// ("locks", the default: advisory locks on PostgreSQL, the lock table's
// rows on MySQL) and without them ("nolocks", which loses commit order for
// concurrent writers of one aggregate). Each save is its own GORM transaction; the
// aggregates are distinct, so the locks never wait, and ns/op is wall time
// per save across the 8 writers.
//
//	go test -run '^$' -bench SaveConcurrent -benchtime 3000x ./internal/coretest/hooks/
func BenchmarkSaveConcurrent(b *testing.B) {
	for _, c := range []struct {
		dialect string
		locks   bool
	}{{"postgres", true}, {"postgres", false}, {"mysql", true}, {"mysql", false}, {"sqlite", true}} {
		locks := c.locks
		name := c.dialect + "/locks"
		if !locks {
			name = c.dialect + "/nolocks"
		}
		b.Run(name, func(b *testing.B) {
			db := benchDB(b, c.dialect)
			if err := hooks.Migrate(context.Background(), db, ""); err != nil {
				b.Fatal(err)
			}
			if err := db.AutoMigrate(&Order{}); err != nil {
				b.Fatal(err)
			}
			p, err := hooks.New(hooks.Config{})
			if err != nil {
				b.Fatal(err)
			}
			setOrderLocks(p, locks)
			if err := db.Use(p); err != nil {
				b.Fatal(err)
			}
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.SetMaxOpenConns(8)
			}
			b.SetParallelism(4) // 4 × GOMAXPROCS(2) = 8 writers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o := &Order{Status: "placed"}
					o.Record(OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: 9.5})
					if err := db.Create(o).Error; err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// discardPublisher acknowledges every message without sending it anywhere,
// so a benchmark measures the relay and the store alone.
type discardPublisher struct{}

func (discardPublisher) Publish(string, ...*message.Message) error { return nil }
func (discardPublisher) Close() error                              { return nil }

// BenchmarkRelayDrain measures how fast 1, 2 and 4 relays sharing one
// outbox (PostgreSQL and MySQL/MariaDB; SQLite with 1 relay) drain a
// pre-filled backlog of 60,000 events over 1,000 aggregates, publishing to a publisher that acknowledges at once (so the
// figure is the relay's and the database's). It reports events/s.
//
//	go test -run '^$' -bench RelayDrain -benchtime 1x ./internal/coretest/hooks/
func BenchmarkRelayDrain(b *testing.B) {
	events, aggregates := 60_000, 1_000
	if testing.Short() { // CI's smoke run: that it works, not how fast
		events = 6_000
	}
	for _, c := range []struct {
		dialect string
		relays  int
	}{{"postgres", 1}, {"postgres", 2}, {"postgres", 4}, {"mysql", 1}, {"mysql", 2}, {"mysql", 4}, {"sqlite", 1}} {
		relays := c.relays
		b.Run(fmt.Sprintf("%s/relays=%d", c.dialect, relays), func(b *testing.B) {
			db := benchDB(b, c.dialect)
			if err := hooks.Migrate(context.Background(), db, ""); err != nil {
				b.Fatal(err)
			}
			p, err := hooks.New(hooks.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				for start := 0; start < events; start += 1000 {
					err := db.Transaction(func(tx *gorm.DB) error {
						for i := start; i < start+1000; i++ {
							if _, err := p.Enqueue(tx, "order", fmt.Sprint(i%aggregates), OrderPlaced{EventVersion: 1, OccurredAt: now(), Amount: float64(i)}); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				switch c.dialect {
				case "postgres":
					db.Exec(`VACUUM ANALYZE outbox_messages`)
				case "mysql":
					db.Exec(`ANALYZE TABLE outbox_messages`)
				}
				b.StartTimer()
				began := time.Now()
				var published atomic.Int64
				done := make(chan struct{})
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for range relays {
					store, err := sqlstore.NewStore(databasesql.New(sqlDBOf(b, db)), sqlstore.StoreConfig{})
					if err != nil {
						b.Fatal(err)
					}
					r, err := relay.New(store, discardPublisher{}, relay.Config{
						Logger: slog.New(slog.DiscardHandler),
						OnBatch: func(res relay.BatchResult) {
							if published.Add(int64(res.Published)) >= int64(events) {
								select {
								case <-done:
								default:
									close(done)
								}
							}
						},
					})
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() { _ = r.Run(ctx) })
				}
				select {
				case <-done:
				case <-time.After(5 * time.Minute):
					b.Fatalf("drained %d of %d events in 5 minutes", published.Load(), events)
				}
				total += time.Since(began)
				cancel()
				wg.Wait()
			}
			b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
		})
	}
}
