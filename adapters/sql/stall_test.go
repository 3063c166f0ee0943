package sql_test

import (
	"context"
	gosql "database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
)

// receive returns the next message of ch, failing t after waitTimeout.
func receive(t *testing.T, ch <-chan *message.Message, what string) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return msg
	case <-time.After(waitTimeout):
		t.Fatalf("%s: nothing within %s", what, waitTimeout)
		return nil
	}
}

// subscribe subscribes a new subscriber of group to topic, with the
// defaults but a short poll interval.
func subscribe(t *testing.T, db *gosql.DB, group, topic string) <-chan *message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := newSubscriber(t, db, testSubscriberConfig(group)).Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("Subscribe %s/%s: %v", group, topic, err)
	}
	return ch
}

// TestHeldMessageDelaysOnlyItsGroupAndTopic holds a message of topic a in
// group g1 unacked (its subscriber keeps a transaction open, with the
// group's offsets row locked) and checks that another group of the same
// topic and a group of another topic still receive messages published
// after it, while g1's next message waits for the ack.
// (watermill-sql's default schema read rows only below the server's oldest
// running transaction, so the held transaction stalled every topic.)
func TestHeldMessageDelaysOnlyItsGroupAndTopic(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	if err := pub.Publish("a", newMessage(1, 0)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	g1First := subscribe(t, db, "g1", "a")
	held := receive(t, g1First, "g1/a first")
	g1 := subscribe(t, db, "g1", "a") // a second subscriber of g1 waits for the first's row lock

	if err := pub.Publish("a", newMessage(1, 1)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if err := pub.Publish("b", newMessage(2, 0)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := receive(t, subscribe(t, db, "g2", "b"), "g2/b while g1/a holds a message")
	if got.Metadata.Get(runtime.MetadataAggregateID) != "agg-2" {
		t.Fatalf("g2/b got %s", got.Metadata.Get(runtime.MetadataAggregateID))
	}
	got.Ack()
	g3 := subscribe(t, db, "g3", "a")
	for seq := range 2 {
		msg := receive(t, g3, "g3/a while g1/a holds a message")
		if msg.Metadata.Get("seq") != strconv.Itoa(seq) {
			t.Fatalf("g3/a message %d has seq %s", seq, msg.Metadata.Get("seq"))
		}
		msg.Ack()
	}
	select {
	case msg := <-g1:
		t.Fatalf("g1's second subscriber got seq %s while the first holds seq 0", msg.Metadata.Get("seq"))
	default:
	}
	held.Ack()
	// Either subscriber of g1 may take the next message.
	var next *message.Message
	select {
	case next = <-g1First:
	case next = <-g1:
	case <-time.After(waitTimeout):
		t.Fatalf("g1/a after the ack: nothing within %s", waitTimeout)
	}
	if next.Metadata.Get("seq") != "1" {
		t.Fatalf("g1/a after the ack got seq %s, want 1", next.Metadata.Get("seq"))
	}
}

// TestOpenTransactionsElsewhereDoNotStall keeps a transaction with a
// transaction id open in another database of the server and one in the
// broker's own database, and checks that messages published after them are
// delivered while both are open. (watermill-sql's default schema waited for
// every transaction of the server older than the message to end.)
func TestOpenTransactionsElsewhereDoNotStall(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	ch := subscribe(t, db, "g", "t")

	cfg, err := pgx.ParseConfig(hookstest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "postgres"
	other := stdlib.OpenDB(*cfg)
	defer other.Close()
	for name, conn := range map[string]*gosql.DB{"database postgres": other, "the broker's database": db} {
		tx, err := conn.Begin()
		if err != nil {
			t.Fatalf("begin in %s: %v", name, err)
		}
		defer tx.Rollback()
		var xid string
		if err := tx.QueryRow(`SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
			t.Fatalf("take a transaction id in %s: %v", name, err)
		}
	}
	for seq := range 3 {
		if err := pub.Publish("t", newMessage(1, seq)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	checkOrder(t, ch, 3)
}
