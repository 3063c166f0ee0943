package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// BenchmarkRetention measures a retention pass over a table of old published
// rows (OUTBOX_BENCH_RETENTION_ROWS, default 100,000; 2,000 under -short),
// batch 1,000, while 4 writers insert events: the rows deleted per second,
// and the writers' inserts per second during the pass against the same
// writers with no retention running (writes/s-idle), measured just before.
// OUTBOX_BENCH_RETENTION_PAUSE sets RetentionConfig.BatchPause (e.g. 5ms).
//
//	go test -run '^$' -bench Retention -benchtime 1x ./internal/coretest/sqlstore/
func BenchmarkRetention(b *testing.B) {
	rows := 100_000
	if testing.Short() {
		rows = 2000
	}
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_RETENTION_ROWS")); err == nil && v > 0 {
		rows = v
	}
	for _, d := range dialects {
		b.Run(string(d), func(b *testing.B) {
			ctx := context.Background()
			db := migrated(b, d)
			w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
			if err != nil {
				b.Fatal(err)
			}
			store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
			if err != nil {
				b.Fatal(err)
			}
			pause, _ := time.ParseDuration(os.Getenv("OUTBOX_BENCH_RETENTION_PAUSE"))
			ret, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{PublishedAge: 24 * time.Hour, BatchPause: pause})
			if err != nil {
				b.Fatal(err)
			}
			// writeFor runs 4 writers until stop is closed and returns
			// their inserts per second.
			writeFor := func(stop <-chan struct{}) float64 {
				var n atomic.Int64
				start := time.Now()
				var wg sync.WaitGroup
				for i := range 4 {
					wg.Go(func() {
						for j := 0; ; j++ {
							select {
							case <-stop:
								return
							default:
							}
							if _, err := w.Write(ctx, databasesql.Executor(db), writeRows(fmt.Sprintf("live-%d-%d", i, j%50))); err != nil {
								b.Error(err)
								return
							}
							n.Add(1)
						}
					})
				}
				<-stop
				wg.Wait()
				return float64(n.Load()) / time.Since(start).Seconds()
			}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				fill := make([]string, 1000)
				for j := range fill {
					fill[j] = "old-" + strconv.Itoa(j%200)
				}
				for done := 0; done < rows; done += len(fill) {
					if _, err := w.Write(ctx, databasesql.Executor(db), writeRows(fill...)); err != nil {
						b.Fatal(err)
					}
				}
				old := time.Now().Add(-30 * 24 * time.Hour).UTC()
				if _, err := db.Exec(rebind(d, `UPDATE outbox_messages SET published_at = ?, created_at = ? WHERE published_at IS NULL`), old, old); err != nil {
					b.Fatal(err)
				}
				stop := make(chan struct{})
				time.AfterFunc(time.Second, func() { close(stop) })
				idle := writeFor(stop)

				stop = make(chan struct{})
				writes := make(chan float64, 1)
				go func() { writes <- writeFor(stop) }()
				waits := func() int64 { // InnoDB row lock waits so far (MySQL, MariaDB)
					var name string
					var n int64
					if d == sqlstore.MySQL {
						if err := db.QueryRow(`SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'`).Scan(&name, &n); err != nil {
							b.Fatal(err)
						}
					}
					return n
				}
				waitsBefore := waits()
				b.StartTimer()
				res := ret.RunOnce(ctx)
				b.StopTimer()
				close(stop)
				during := <-writes
				if d == sqlstore.MySQL {
					b.ReportMetric(float64(waits()-waitsBefore), "row-lock-waits")
				}
				if res.Err != nil || res.Published != int64(rows) {
					b.Fatalf("pass: %+v, want %d rows deleted", res, rows)
				}
				b.ReportMetric(float64(res.Published)/res.Duration.Seconds(), "rows/s")
				b.ReportMetric(idle, "writes/s-idle")
				b.ReportMetric(during, "writes/s-during")
				if _, err := db.Exec(`DELETE FROM outbox_messages`); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
