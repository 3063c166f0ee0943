package hooks_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/relay"
)

// benchDB opens a fresh database of dialect, "postgres" or "mysql".
func benchDB(b *testing.B, dialect string) *gorm.DB {
	b.Helper()
	if dialect == "mysql" {
		return hookstest.MariaDB(b, nil)
	}
	return hookstest.Postgres(b, nil)
}

// BenchmarkCreate measures what the plugin adds to a GORM Create on
// PostgreSQL and MySQL/MariaDB: the same Create of one order, without events
// and without the plugin ("plain"), and with one recorded event written to
// the outbox in the same transaction ("outbox").
//
//	go test -run '^$' -bench Create -benchmem ./hooks/
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

// BenchmarkClaim measures a store claim of 1,000 rows on PostgreSQL and
// MySQL/MariaDB with a publish function that accepts everything: the relay's
// database cost per batch.
//
//	go test -run '^$' -bench Claim -benchmem ./hooks/
func BenchmarkClaim(b *testing.B) {
	for _, dialect := range []string{"postgres", "mysql"} {
		b.Run(dialect, func(b *testing.B) { benchmarkClaim(b, dialect) })
	}
}

func benchmarkClaim(b *testing.B, dialect string) {
	db := benchDB(b, dialect)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		b.Fatal(err)
	}
	p, err := hooks.New(hooks.Config{})
	if err != nil {
		b.Fatal(err)
	}
	store, err := hooks.NewStore(db, hooks.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	fill := func() {
		err := db.Transaction(func(tx *gorm.DB) error {
			for i := range 1000 {
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
		if err != nil || len(batch.Messages) != 1000 {
			b.Fatalf("Claim = %d messages, %v", len(batch.Messages), err)
		}
		if err := store.Mark(ctx, batch, relay.Outcome{Published: ids(batch.Messages)}); err != nil {
			b.Fatal(err)
		}
	}
}
