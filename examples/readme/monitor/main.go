// Command monitor is the program of the documentation of packages
// adapters/metrics and runtime/health: a relay
// whose metrics Prometheus scrapes at /metrics, with liveness at /livez and
// readiness at /readyz. It runs on SQLite and an in-process broker, with no
// setup.
//
//	go run ./examples/readme/monitor -listen 127.0.0.1:9090
package main

import (
	"context"
	"database/sql"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	_ "github.com/glebarez/go-sqlite" // the "sqlite" database/sql driver
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/adapters/metrics"
	"github.com/gooutbox/outbox/runtime/health"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:9090", "address of /metrics, /livez and /readyz")
	file := flag.String("database", "monitor.db", "SQLite file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	db, err := sql.Open("sqlite", *file)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, db, ln); err != nil {
		log.Fatal(err)
	}
}

// run relays the outbox of db and serves its metrics and health on ln
// until ctx is cancelled.
func run(ctx context.Context, db *sql.DB, ln net.Listener) error {
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.SQLite, Outbox: true}); err != nil {
		return err
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{Dialect: sqlstore.SQLite})
	if err != nil {
		return err
	}
	broker, err := memory.New(memory.Config{}) // any Watermill publisher
	if err != nil {
		return err
	}
	defer broker.Close()

	m, err := metrics.New(metrics.Config{Store: store}) // backlog gauges, queried at scrape time
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry() // yours: nothing is registered globally
	reg.MustRegister(m)
	rl, err := relay.New(store, broker, relay.Config{OnBatch: m.ObserveBatch})
	if err != nil {
		return err
	}
	if err := m.SetRelay(rl); err != nil { // outbox_relay_shards_held
		return err
	}
	// A consumer adds consumer.Config{OnOutcome: m.Consumer("billing")},
	// then m.AddInbox(c) for outbox_inbox_messages.

	checker, err := health.New(health.Config{
		Relay: rl, // its LastProgress, within MaxStall (1m)
		DB:    db, // PingContext
		OldestPending: func(ctx context.Context) (time.Duration, error) {
			st, err := store.Stats(ctx)
			return st.OldestPending, err
		}, // within MaxOldestPending (5m)
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /livez", checker.Liveness())   // the relay only: a restart may cure it
	mux.Handle("GET /readyz", checker.Readiness()) // every check
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	return rl.Run(ctx)
}
