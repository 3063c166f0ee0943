package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// exampleDB opens a fresh schema of the test PostgreSQL; remove closes
// it (the test run drops the schema). Yours: sql.Open("pgx",
// "postgres://user:pass@host/db").
func exampleDB() (db *sql.DB, remove func(), err error) {
	db, err = sql.Open("pgx", runtimetest.ExamplePostgresDSN())
	if err != nil {
		return nil, nil, err
	}
	return db, func() { db.Close() }, nil
}

// A relay process needs a *sql.DB and nothing else: the store detects the
// dialect from the driver. Here a Writer puts an event in the outbox, as the
// GORM plugin does inside a business transaction, and the store claims it.
func ExampleNewStore() {
	db, remove, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer remove()
	ctx := context.Background()
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true}); err != nil { // dialect from the driver, default table
		fmt.Println(err)
		return
	}

	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	row := sqlstore.Row{Topic: "orders", Envelope: runtime.Envelope{
		EventID: runtime.NewEventID(), EventType: "orders.order_placed", EventVersion: 1,
		AggregateType: "order", AggregateID: "42", OccurredAt: time.Now(), Payload: []byte(`{"total":"12.50"}`),
	}}
	if _, err := w.Write(ctx, databasesql.Executor(tx), []sqlstore.Row{row}); err != nil { // with the business rows
		fmt.Println(err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println(err)
		return
	}

	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	batch, err := store.Claim(ctx, relay.ClaimRequest{Owner: "example", Limit: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range batch.Messages {
		fmt.Println(m.Topic, m.EventType, m.AggregateID, string(m.Payload))
	}
	// Output:
	// orders orders.order_placed 42 {"total":"12.50"}
}

// A relay that reads the outbox from a change stream instead of a claim
// query decodes each row's columns into the message the relay publishes.
func ExampleDecodeRow() {
	m, err := sqlstore.DecodeRow(sqlstore.RowValues{
		ID: 7, EventID: "0193a1f0-7c3e-7d4a-9b1e-3f2a1c0d4e5f", EventType: "orders.order_placed", EventVersion: 1,
		AggregateType: "order", AggregateID: "42", Topic: "orders",
		Payload: []byte(`{}`), Headers: `{"correlation_id":"c-1"}`,
		OccurredAt: time.Date(2026, 11, 30, 13, 0, 0, 0, time.FixedZone("CET", 3600)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.ID, m.EventID, m.Headers["correlation_id"], m.OccurredAt)
	// Output:
	// 7 0193a1f0-7c3e-7d4a-9b1e-3f2a1c0d4e5f c-1 2026-11-30 12:00:00 +0000 UTC
}

// An inbox makes a handler's transaction apply each event once per
// consumer: the marker insert is its first statement, in a transaction of
// InTx (which, on MySQL and MariaDB, also bounds it on the server).
func ExampleInbox_Record() {
	db, remove, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer remove()
	ctx := context.Background()
	drv := databasesql.New(db)
	if err := sqlstore.Migrate(ctx, drv, sqlstore.Schema{Dialect: sqlstore.Postgres, Inbox: true}); err != nil {
		fmt.Println(err)
		return
	}
	inbox, err := sqlstore.NewInbox(sqlstore.Postgres, "", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	eventID := runtime.NewEventID()
	for range 2 { // the same event, delivered twice
		var applied bool
		err := inbox.InTx(ctx, drv, func(tx sqlstore.Tx) error {
			var err error
			applied, err = inbox.Record(ctx, tx, "billing", eventID, "orders.order_paid", time.Now())
			// ... the handler's writes, through tx, when applied ...
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("applied:", applied)
	}
	// Output:
	// applied: true
	// applied: false
}
