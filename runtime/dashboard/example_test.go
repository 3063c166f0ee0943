package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/gooutbox/outbox/runtime/dashboard"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// Example mounts a read-only dashboard under /outbox/ of an application's
// mux, on a PostgreSQL outbox.
func Example() {
	ctx := context.Background()
	dsn := runtimetest.ExamplePostgresDSN() // a fresh schema; yours: "postgres://user:pass@host/db"
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		fmt.Println(err)
		return
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	dash, err := dashboard.New(store, dashboard.Config{}) // read-only
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go dash.Run(runCtx) // samples the backlog for the charts

	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", dash)) // behind your auth middleware
	mux.Handle("/outbox", http.StripPrefix("/outbox", dash))  // redirects to /outbox/

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outbox/", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output: 200 text/html; charset=utf-8
}
