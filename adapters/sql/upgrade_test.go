package sql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	watermillsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/sql"
	"github.com/gooutbox/outbox/runtime"
)

// legacySchema is the layout this package used before offsets were given in
// commit order: watermill-sql's default PostgreSQL schema with a BYTEA
// payload.
var legacySchema = watermillsql.DefaultPostgreSQLSchema{GeneratePayloadType: func(string) string { return "BYTEA" }}

// TestUpgrade writes a topic with watermill-sql's default layout (two
// transactions whose commit order differs from their offsets' order, and a
// group that has read some of it), checks that this package refuses the
// tables with ErrLegacySchema, upgrades them, and checks that the old group
// goes on where it stopped and a new group reads everything, both in the
// order the old subscribers read.
func TestUpgrade(t *testing.T) {
	db := newDB(t, 0)
	ctx := context.Background()
	logger := watermill.NopLogger{}
	// tx1 takes its transaction id first and inserts last.
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	if _, err := tx1.ExecContext(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	init, err := watermillsql.NewPublisher(watermillsql.BeginnerFromStdSQL(db), watermillsql.PublisherConfig{SchemaAdapter: legacySchema, AutoInitializeSchema: true}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := init.Publish("t", newMessage(1, 0)); err != nil { // creates the table; offset 1
		t.Fatalf("legacy publish: %v", err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	legacyPublish := func(tx watermillsql.Tx, msgs ...*message.Message) {
		t.Helper()
		p, err := watermillsql.NewPublisher(tx, watermillsql.PublisherConfig{SchemaAdapter: legacySchema}, logger)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Publish("t", msgs...); err != nil {
			t.Fatalf("legacy publish: %v", err)
		}
	}
	legacyPublish(watermillsql.TxFromStdSQL(tx2), newMessage(2, 0), newMessage(2, 1)) // offsets 2, 3
	legacyPublish(watermillsql.TxFromStdSQL(tx1), newMessage(3, 0), newMessage(3, 1)) // offsets 4, 5
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	// Old order, by transaction id: agg-3 (tx1, the oldest, committed
	// last), agg-1, agg-2 (tx2); not the offsets' order (agg-1, agg-2,
	// agg-3) nor the commit order (agg-1, agg-2, agg-3).
	want := []string{"agg-3/0", "agg-3/1", "agg-1/0", "agg-2/0", "agg-2/1"}

	// Group g1 reads the first 3 with watermill-sql's own subscriber,
	// acking (and committing) each.
	ackDeadline := 10 * time.Second
	legacySub, err := watermillsql.NewSubscriber(watermillsql.BeginnerFromStdSQL(db), watermillsql.SubscriberConfig{
		ConsumerGroup:    "g1",
		PollInterval:     10 * time.Millisecond,
		AckDeadline:      &ackDeadline,
		SchemaAdapter:    watermillsql.DefaultPostgreSQLSchema{GeneratePayloadType: legacySchema.GeneratePayloadType, SubscribeBatchSize: 1},
		OffsetsAdapter:   watermillsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
	}, logger)
	if err != nil {
		t.Fatal(err)
	}
	legacyCh, err := legacySub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := receive(t, legacyCh, "legacy g1")
		if got := label(msg); got != want[i] {
			t.Fatalf("legacy g1 message %d = %s, want %s", i, got, want[i])
		}
		msg.Ack()
	}
	// The subscriber commits an acked message's offset when it takes the
	// next; wait for the third.
	waitFor(t, func() bool {
		var acked int
		err := db.QueryRow(`SELECT count(*) FROM "watermill_t" m, "watermill_offsets_t" o
			WHERE o.consumer_group = 'g1' AND (m.transaction_id, m."offset") <= (o.last_processed_transaction_id, o.offset_acked)`).Scan(&acked)
		return err == nil && acked == 3
	}, "legacy g1 commits 3 messages")
	if err := legacySub.Close(); err != nil {
		t.Fatal(err)
	}

	pub := newPublisher(t, db)
	err = pub.Publish("t", newMessage(9, 0))
	if !errors.Is(err, sql.ErrLegacySchema) || !runtime.IsTransient(err) {
		t.Fatalf("Publish on the legacy layout = %v, want a transient error wrapping ErrLegacySchema", err)
	}
	if _, err := newSubscriber(t, db, testSubscriberConfig("g1")).Subscribe(ctx, "t"); !errors.Is(err, sql.ErrLegacySchema) {
		t.Fatalf("Subscribe on the legacy layout = %v, want ErrLegacySchema", err)
	}

	if err := sql.Upgrade(ctx, db, "t"); err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	if err := sql.Upgrade(ctx, db, "t"); err != nil {
		t.Fatalf("Upgrade again: %v", err)
	}
	if err := pub.Publish("t", newMessage(9, 0)); err != nil {
		t.Fatalf("Publish after Upgrade: %v", err)
	}
	want = append(want, "agg-9/0")
	for group, from := range map[string]int{"g1": 3, "g2": 0} {
		ch := subscribe(t, db, group, "t")
		for i := from; i < len(want); i++ {
			msg := receive(t, ch, group)
			if got := label(msg); got != want[i] {
				t.Fatalf("%s message %d = %s, want %s", group, i, got, want[i])
			}
			msg.Ack()
		}
	}
}

// TestUpgradeJSONPayload upgrades a table of watermill-sql's default
// layout with its default JSON payload column, which becomes BYTEA with
// the JSON text's bytes.
func TestUpgradeJSONPayload(t *testing.T) {
	db := newDB(t, 0)
	p, err := watermillsql.NewPublisher(watermillsql.BeginnerFromStdSQL(db), watermillsql.PublisherConfig{
		SchemaAdapter: watermillsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("t", newMessage(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := sql.Upgrade(context.Background(), db, "t"); err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	msg := receive(t, subscribe(t, db, "g", "t"), "g")
	if string(msg.Payload) != `{"seq":0}` {
		t.Fatalf("payload = %q", msg.Payload)
	}
}

// TestCounterRowRecreated deletes a topic's counter row: the Publish that
// finds it missing fails without inserting anything, and the next one
// recreates it after the highest offset, so no offset is given twice.
func TestCounterRowRecreated(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	for seq := range 2 {
		if err := pub.Publish("t", newMessage(1, seq)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`DELETE FROM "watermill_seq_t"`); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", newMessage(1, 2)); err == nil {
		t.Fatal("Publish without the counter row succeeded")
	}
	for seq := 2; seq < 4; seq++ {
		if err := pub.Publish("t", newMessage(1, seq)); err != nil {
			t.Fatalf("Publish after the failure: %v", err)
		}
	}
	checkOrder(t, subscribe(t, db, "g", "t"), 4)
}

// label names a message by its aggregate and seq.
func label(msg *message.Message) string {
	return msg.Metadata.Get(runtime.MetadataAggregateID) + "/" + msg.Metadata.Get("seq")
}

// waitFor polls cond until it holds, failing t after waitTimeout.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCreateStatementsRefuseTheLegacyLayout runs CreateStatements, as a
// migration tool would, on a topic of watermill-sql's default layout: the
// check fails the migration; after Upgrade the statements run (and run
// again) without changing anything.
func TestCreateStatementsRefuseTheLegacyLayout(t *testing.T) {
	db := newDB(t, 0)
	ctx := context.Background()
	p, err := watermillsql.NewPublisher(watermillsql.BeginnerFromStdSQL(db), watermillsql.PublisherConfig{SchemaAdapter: legacySchema, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("t", newMessage(1, 0), newMessage(1, 1)); err != nil {
		t.Fatal(err)
	}
	migrate := func() error {
		stmts, err := sql.CreateStatements("t")
		if err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	if err := migrate(); err == nil || !strings.Contains(err.Error(), "sql.Upgrade") {
		t.Fatalf("CreateStatements on the legacy layout = %v, want the check's error naming sql.Upgrade", err)
	}
	if err := sql.Upgrade(ctx, db, "t"); err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	for range 2 {
		if err := migrate(); err != nil {
			t.Fatalf("CreateStatements after Upgrade: %v", err)
		}
	}
	if err := newPublisher(t, db).Publish("t", newMessage(1, 2)); err != nil {
		t.Fatal(err)
	}
	checkOrder(t, subscribe(t, db, "g", "t"), 3)
}

// TestUpgradeMixedLayouts: a subscriber of watermill-sql's default layout
// created the offsets table of a topic whose messages table is of this
// package's layout. While no group has read anything, Upgrade converts the
// offsets table; once one has, it refuses.
func TestUpgradeMixedLayouts(t *testing.T) {
	for _, read := range []bool{false, true} {
		t.Run(fmt.Sprintf("read=%v", read), func(t *testing.T) {
			db := newDB(t, 0)
			ctx := context.Background()
			pub := newPublisher(t, db)
			if err := pub.Publish("t", newMessage(1, 0)); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`DROP TABLE "watermill_offsets_t"`); err != nil {
				t.Fatal(err)
			}
			// The table watermill-sql's DefaultPostgreSQLOffsetsAdapter creates.
			if _, err := db.Exec(`CREATE TABLE "watermill_offsets_t" (consumer_group VARCHAR(255) NOT NULL, offset_acked BIGINT,
				last_processed_transaction_id xid8 NOT NULL, PRIMARY KEY(consumer_group))`); err != nil {
				t.Fatal(err)
			}
			position := `'0'`
			if read {
				position = `pg_current_xact_id()`
			}
			if _, err := db.Exec(`INSERT INTO "watermill_offsets_t" VALUES ('g', 0, ` + position + `)`); err != nil {
				t.Fatal(err)
			}
			if _, err := newSubscriber(t, db, testSubscriberConfig("g")).Subscribe(ctx, "t"); !errors.Is(err, sql.ErrLegacySchema) {
				t.Fatalf("Subscribe = %v, want ErrLegacySchema", err)
			}
			err := sql.Upgrade(ctx, db, "t")
			if read {
				if err == nil || !strings.Contains(err.Error(), "cannot be converted") {
					t.Fatalf("Upgrade after a group read = %v, want a refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Upgrade: %v", err)
			}
			checkOrder(t, subscribe(t, db, "g", "t"), 1)
		})
	}
}

// TestCounterAfterRetention deletes every message a group has read and the
// counter row: the recreated counter starts after the group's position, so
// the next message is delivered, not skipped.
func TestCounterAfterRetention(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	for seq := range 3 {
		if err := pub.Publish("t", newMessage(1, seq)); err != nil {
			t.Fatal(err)
		}
	}
	ch := subscribe(t, db, "g", "t")
	checkOrder(t, ch, 3)
	waitFor(t, func() bool {
		var acked int
		return db.QueryRow(`SELECT offset_acked FROM "watermill_offsets_t" WHERE consumer_group = 'g'`).Scan(&acked) == nil && acked == 3
	}, "g commits its position")
	if _, err := db.Exec(`DELETE FROM "watermill_t"; DELETE FROM "watermill_seq_t"`); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", newMessage(1, 3)); err == nil {
		t.Fatal("Publish without the counter row succeeded")
	}
	if err := pub.Publish("t", newMessage(1, 3)); err != nil {
		t.Fatalf("Publish after the failure: %v", err)
	}
	if msg := receive(t, ch, "g after the retention"); msg.Metadata.Get("seq") != "3" {
		t.Fatalf("got seq %s, want 3", msg.Metadata.Get("seq"))
	}
}
