package sql_test

import (
	"context"
	gosql "database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql" // the "mysql" driver, refused

	"github.com/gooutbox/outbox/adapters/sql"
	"github.com/gooutbox/outbox/runtime"
)

// newMessage returns a message of aggregate agg carrying seq.
func newMessage(agg, seq int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"seq":%d}`, seq)))
	msg.Metadata.Set(runtime.MetadataAggregateID, fmt.Sprintf("agg-%d", agg))
	msg.Metadata.Set("seq", fmt.Sprint(seq))
	return msg
}

// checkOrder receives n messages from ch, acking each, and checks that every
// aggregate's seq metadata counts up from 0 with no gap or repeat.
func checkOrder(t *testing.T, ch <-chan *message.Message, n int) {
	t.Helper()
	next := map[string]int{}
	deadline := time.After(waitTimeout)
	for i := range n {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d of %d messages", i, n)
			}
			agg, seq := msg.Metadata.Get(runtime.MetadataAggregateID), msg.Metadata.Get("seq")
			if want := fmt.Sprint(next[agg]); seq != want {
				t.Fatalf("message %d: aggregate %s seq %s, want %s", i, agg, seq, want)
			}
			next[agg]++
			msg.Ack()
		case <-deadline:
			t.Fatalf("received %d of %d messages within %s", i, n, waitTimeout)
		}
	}
}

// TestOrderBacklog publishes 5,000 messages over 200 aggregates as the relay
// does (sequential Publish calls of batches), then reads them back with two
// competing subscribers of one group and checks count and per-aggregate
// order.
func TestOrderBacklog(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	const n, aggs, batch = 5000, 200, 500
	for i := 0; i < n; i += batch {
		msgs := make([]*message.Message, batch)
		for j := range msgs {
			msgs[j] = newMessage((i+j)%aggs, (i+j)/aggs)
		}
		if err := pub.Publish("orders", msgs...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan *message.Message)
	for range 2 {
		sub := newSubscriber(t, db, testSubscriberConfig("g1"))
		ch, err := sub.Subscribe(ctx, "orders")
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		go func() {
			for msg := range ch {
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	checkOrder(t, out, n)
	select {
	case msg := <-out:
		t.Fatalf("extra message %s", msg.UUID)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestOffsetsFollowCommitOrder holds a publishing transaction open after it
// took the topic's next offset: a later Publish waits for it, so the later
// message's offset is higher and it commits after, and the subscriber reads
// both in that order without skipping the first. (A subscriber reading a
// plain BIGSERIAL offset would deliver the later row, move past the earlier
// one, and skip it for good.)
func TestOffsetsFollowCommitOrder(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	if err := pub.Publish("t", newMessage(1, 0)); err != nil { // creates the tables
		t.Fatalf("Publish: %v", err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	defer tx.Rollback()
	// What Publish does, in a transaction left open.
	if _, err := tx.ExecContext(ctx, `WITH seq AS (UPDATE "watermill_seq_t" SET last_offset = last_offset + 1 RETURNING last_offset)
		INSERT INTO "watermill_t" ("offset", uuid, payload, metadata)
		SELECT last_offset, $1, $2, '{"aggregate_id":"agg-2","seq":"0"}' FROM seq`, watermill.NewUUID(), []byte("slow")); err != nil {
		t.Fatalf("insert in open transaction: %v", err)
	}
	published := make(chan error, 1)
	go func() { published <- pub.Publish("t", newMessage(1, 1)) }()
	waitForLockWait(t, db, `"watermill_seq_t"`)

	sub := newSubscriber(t, db, testSubscriberConfig("g1"))
	ch, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	first := <-ch
	if got := first.Metadata.Get("seq"); got != "0" || first.Metadata.Get(runtime.MetadataAggregateID) != "agg-1" {
		t.Fatalf("first message = %s seq %s, want agg-1 seq 0", first.Metadata.Get(runtime.MetadataAggregateID), got)
	}
	first.Ack()
	select {
	case err := <-published:
		t.Fatalf("Publish returned (%v) while an earlier publishing transaction holds the counter", err)
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := <-published; err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for _, want := range []string{"agg-2", "agg-1"} {
		select {
		case msg := <-ch:
			if got := msg.Metadata.Get(runtime.MetadataAggregateID); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
			msg.Ack()
		case <-time.After(waitTimeout):
			t.Fatalf("no message from %s within %s", want, waitTimeout)
		}
	}
}

// waitForLockWait waits until a session of db's database waits for a lock
// in a statement naming table (the Publish blocked on the counter row).
func waitForLockWait(t *testing.T, db *gosql.DB, table string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, table).Scan(&n); err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waits for a lock within %s", waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPublishPermanentErrors checks which errors are permanent.
func TestPublishPermanentErrors(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	for _, tc := range []struct {
		name  string
		topic string
		msg   *message.Message
		is    error
	}{
		{"invalid character", "orders;drop", newMessage(1, 0), sql.ErrInvalidTopic},
		{"space", "two words", newMessage(1, 0), sql.ErrInvalidTopic},
		{"empty", "", newMessage(1, 0), sql.ErrInvalidTopic},
		{"too long", strings.Repeat("x", sql.MaxTopicLength+1), newMessage(1, 0), sql.ErrInvalidTopic},
		{"uuid too long", "t", message.NewMessage(strings.Repeat("u", 37), []byte("x")), nil},
		{"nul in uuid", "t", message.NewMessage("a\x00b", []byte("x")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pub.Publish(tc.topic, newMessage(2, 0), tc.msg)
			if !runtime.IsPermanent(err) {
				t.Fatalf("Publish = %v, want a permanent error", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Publish = %v, want it to wrap %v", err, tc.is)
			}
		})
	}
	// The longest valid topic works, and nothing of the failed calls above
	// was written.
	long := strings.Repeat("y", sql.MaxTopicLength)
	if err := pub.Publish(long, newMessage(1, 0)); err != nil {
		t.Fatalf("Publish to a %d-byte topic: %v", len(long), err)
	}
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM "watermill_t"`).Scan(&rows); err != nil {
		t.Fatalf("count: %v", err)
	}
	if rows != 0 {
		t.Errorf("watermill_t has %d rows after failed publishes, want 0", rows)
	}
}

// TestPublishConnectionErrorIsRetryable checks that a database that cannot
// be reached gives an error that is not permanent.
func TestPublishConnectionErrorIsRetryable(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	db.Close()
	err := pub.Publish("t", newMessage(1, 0))
	if err == nil || runtime.IsPermanent(err) {
		t.Fatalf("Publish on a closed database = %v, want a retryable error", err)
	}
}

// TestPublishLargeBatch publishes more messages than one INSERT carries.
func TestPublishLargeBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("large batch skipped with -short")
	}
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	n := sql.MaxMessagesPerInsert + 10
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = newMessage(i%7, i/7)
	}
	if err := pub.Publish("big", msgs...); err != nil {
		t.Fatalf("Publish(%d messages): %v", n, err)
	}
	var rows int
	if err := db.QueryRow(`SELECT count(*) FROM "watermill_big"`).Scan(&rows); err != nil {
		t.Fatalf("count: %v", err)
	}
	if rows != n {
		t.Fatalf("%d rows, want %d", rows, n)
	}
}

func TestClosed(t *testing.T) {
	db := newDB(t, 0)
	pub := newPublisher(t, db)
	if err := pub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := pub.Publish("t", newMessage(1, 0)); !errors.Is(err, sql.ErrPublisherClosed) {
		t.Fatalf("Publish after Close = %v, want ErrPublisherClosed", err)
	}
	sub := newSubscriber(t, db, testSubscriberConfig("g1"))
	ch, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("Subscriber.Close: %v", err)
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("message after Close")
		}
	default:
		t.Fatal("subscription channel open when Close returned")
	}
	if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, sql.ErrSubscriberClosed) {
		t.Fatalf("Subscribe after Close = %v, want ErrSubscriberClosed", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, cfg := range []sql.SubscriberConfig{
		{PollInterval: -1},
		{AckDeadline: -time.Second},
		{BatchSize: -1},
		{ConsumerGroup: strings.Repeat("g", 256)},
	} {
		if err := cfg.Validate(); !errors.Is(err, sql.ErrInvalidConfig) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := sql.NewPublisher(nil, sql.PublisherConfig{}); !errors.Is(err, sql.ErrInvalidConfig) {
		t.Errorf("NewPublisher(nil) = %v, want ErrInvalidConfig", err)
	}
	if _, err := sql.NewSubscriber(nil, sql.SubscriberConfig{}); !errors.Is(err, sql.ErrInvalidConfig) {
		t.Errorf("NewSubscriber(nil) = %v, want ErrInvalidConfig", err)
	}
}

// TestRefusesAnotherDatabase: a *sql.DB of another database's driver is
// refused at construction with ErrNotPostgres (every publish would fail
// retryably, for good), not at the first publish.
func TestRefusesAnotherDatabase(t *testing.T) {
	t.Parallel()
	db, err := gosql.Open("mysql", "root@tcp(127.0.0.1:1)/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sql.NewPublisher(db, sql.PublisherConfig{}); !errors.Is(err, sql.ErrNotPostgres) {
		t.Errorf("NewPublisher(MySQL) = %v, want ErrNotPostgres", err)
	}
	if _, err := sql.NewSubscriber(db, sql.SubscriberConfig{ConsumerGroup: "g"}); !errors.Is(err, sql.ErrNotPostgres) {
		t.Errorf("NewSubscriber(MySQL) = %v, want ErrNotPostgres", err)
	}
}
