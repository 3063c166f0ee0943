package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// benchDriver is one driver on a fresh PostgreSQL schema: its pool, and
// how a business transaction on it writes rows.
type benchDriver struct {
	name  string
	db    sqlstore.DB
	write func(ctx context.Context, w *sqlstore.Writer, rows []sqlstore.Row) error
}

// benchDrivers opens PostgreSQL through database/sql (pgx's stdlib driver)
// and through pgx natively, each on a schema of its own.
func benchDrivers(b *testing.B) []benchDriver {
	sqlDB := migrated(b, sqlstore.Postgres)
	pool := migratedPgx(b)
	return []benchDriver{
		{"databasesql", databasesql.New(sqlDB), func(ctx context.Context, w *sqlstore.Writer, rows []sqlstore.Row) error {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := w.Write(ctx, databasesql.Executor(tx), rows); err != nil {
				return err
			}
			return tx.Commit()
		}},
		{"pgxv5", pool, func(ctx context.Context, w *sqlstore.Writer, rows []sqlstore.Row) error {
			tx, err := pool.PgxPool().Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := w.Write(ctx, pgxv5.Executor(tx), rows); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
	}
}

// BenchmarkDriverWrite: a business transaction writing 1 or 10 events of
// one aggregate with a Writer, through each driver on the same
// PostgreSQL (one op = one committed transaction).
func BenchmarkDriverWrite(b *testing.B) {
	ctx := context.Background()
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range benchDrivers(b) {
		for _, n := range []int{1, 10} {
			b.Run(fmt.Sprintf("%s/events=%d", d.name, n), func(b *testing.B) {
				ids := make([]string, n)
				for i := 0; b.Loop(); i++ {
					for j := range ids {
						ids[j] = fmt.Sprintf("agg-%d", i)
					}
					if err := d.write(ctx, w, writeRows(ids...)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDriverClaim: the relay's claim and mark of batches of 100
// through each driver's store on the same PostgreSQL (one op = one batch
// claimed and marked published; the rows are written before the timer).
func BenchmarkDriverClaim(b *testing.B) {
	ctx := context.Background()
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range benchDrivers(b) {
		b.Run(d.name, func(b *testing.B) {
			store, err := sqlstore.NewStore(d.db, sqlstore.StoreConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			const batch = 100
			refill := func() {
				ids := make([]string, 1000)
				for i := range ids {
					ids[i] = fmt.Sprintf("agg-%d", i%200)
				}
				if err := d.write(ctx, w, writeRows(ids...)); err != nil {
					b.Fatal(err)
				}
			}
			left := 0
			for b.Loop() {
				if left < batch {
					b.StopTimer()
					refill()
					left += 1000
					b.StartTimer()
				}
				bt, err := store.Claim(ctx, relay.ClaimRequest{Owner: "bench", Limit: batch})
				if err != nil {
					b.Fatal(err)
				}
				if len(bt.Messages) == 0 {
					b.Fatal("claimed nothing")
				}
				ids := make([]int64, len(bt.Messages))
				for i, m := range bt.Messages {
					ids[i] = m.ID
				}
				if err := store.Mark(ctx, bt, relay.Outcome{Published: ids}); err != nil {
					b.Fatal(err)
				}
				left -= len(bt.Messages)
			}
		})
	}
}
