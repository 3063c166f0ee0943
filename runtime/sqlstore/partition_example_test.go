package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// A partitioned outbox on PostgreSQL: one partition per day, and a
// retention that creates the days ahead and drops the days older than a
// week whose events are all published. Writers, relays and the operator
// command need nothing more. (Not run: the retention runs until ctx ends.)
func ExampleMigrate_partitioned() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/shop")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true, Partitioned: &sqlstore.PartitionConfig{Interval: 24 * time.Hour}}); err != nil {
		fmt.Println(err) // wraps sqlstore.ErrNotPartitioned if a plain outbox table exists
		return
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{
		PublishedAge: 7 * 24 * time.Hour,
		OnPass: func(res sqlstore.RetentionResult) {
			slog.Info("outbox retention", "partitions_dropped", res.PartitionsDropped, "kept", res.PartitionsKept)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = r.Run(ctx) // until ctx is done
}

// The bounds of a partition are the smallest UUIDv7 of their millisecond.
func ExampleEventIDBound() {
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	fmt.Printf("FOR VALUES FROM ('%s') TO ('%s')\n", sqlstore.EventIDBound(day), sqlstore.EventIDBound(day.Add(24*time.Hour)))
	// Output:
	// FOR VALUES FROM ('01a229c0-5400-0000-0000-000000000000') TO ('01a22ee6-b000-0000-0000-000000000000')
}
