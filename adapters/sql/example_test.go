package sql_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/adapters/sql"
)

// A publisher and a subscriber on one PostgreSQL database. (It needs the
// server, so it has no Output line and only compiles.)
func Example() {
	cfg, err := pgx.ParseConfig("postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		panic(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()

	pub, err := sql.NewPublisher(db, sql.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	// One statement: both messages are committed, in this order, or neither.
	if err := pub.Publish("orders",
		message.NewMessage(watermill.NewUUID(), []byte(`{"status":"created"}`)),
		message.NewMessage(watermill.NewUUID(), []byte(`{"status":"paid"}`)),
	); err != nil {
		panic(err)
	}

	sub, err := sql.NewSubscriber(db, sql.SubscriberConfig{ConsumerGroup: "billing"})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		panic(err)
	}
	for range 2 {
		msg := <-msgs
		fmt.Println(string(msg.Payload))
		msg.Ack()
	}
}

// Converting a topic's tables written by an earlier version of this package
// (or by watermill-sql's default PostgreSQL schema) once, after stopping the
// programs that publish or subscribe to it: every message keeps its place,
// and every consumer group goes on with the first message it had not read.
// Until then, Publish fails with a transient error wrapping
// sql.ErrLegacySchema (the relay keeps the messages and retries) and
// Subscribe fails.
func ExampleUpgrade() {
	cfg, err := pgx.ParseConfig("postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		panic(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	for _, topic := range []string{"orders", "payments"} {
		if err := sql.Upgrade(context.Background(), db, topic); err != nil {
			panic(err)
		}
	}
}

// The statements a migration tool runs to create a topic's tables, for
// publishers and subscribers configured with SkipSchemaInitialization: the
// advisory lock, a check that refuses tables of watermill-sql's default
// layout, then the tables.
func ExampleCreateStatements() {
	stmts, err := sql.CreateStatements("orders")
	if err != nil {
		panic(err)
	}
	for _, stmt := range stmts {
		fmt.Println(strings.Join(strings.Fields(stmt)[:2], " "))
	}
	// Output:
	// SELECT pg_advisory_xact_lock(hashtext('gooutbox/adapters/sql:
	// DO 'BEGIN
	// CREATE TABLE
	// CREATE TABLE
	// CREATE TABLE
	// INSERT INTO
}
