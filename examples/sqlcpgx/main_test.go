package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/examples/readme/orders"
	"github.com/gooutbox/outbox/examples/sqlcpgx/db"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
)

// TestServicePublishesInCommitOrder runs the service on PostgreSQL through
// pgx and sqlc with an in-process Kafka, and reads the topic back: the
// order's two events, in the order their transactions committed, keyed by
// the order id.
func TestServicePublishesInCommitOrder(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, hookstest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	brokers := kafkatest.NewCluster(t)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx, pool, brokers) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return within 30s of its cancellation")
		}
		pool.Close()
	})

	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: "order", GroupID: "sqlcpgx-test", MaxWait: 100 * time.Millisecond})
	defer r.Close()
	rdctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	var types []string
	var keys []string
	for range 2 {
		msg, err := r.ReadMessage(rdctx)
		if err != nil {
			t.Fatalf("read topic order: %v (got %v so far)", err, types)
		}
		for _, h := range msg.Headers {
			if h.Key == runtime.MetadataEventType {
				types = append(types, string(h.Value))
			}
		}
		keys = append(keys, string(msg.Key))
	}
	if want := []string{"orders.order_placed", "orders.order_paid"}; len(types) != 2 || types[0] != want[0] || types[1] != want[1] {
		t.Fatalf("event types %v, want %v (commit order)", types, want)
	}
	if keys[0] != keys[1] || keys[0] == "" {
		t.Fatalf("keys %q: want the order id on both", keys)
	}

	// The payments consumer applied OrderPaid through sqlc, in its inbox
	// transaction.
	id, err := strconv.ParseInt(keys[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	q := db.New(pool)
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := q.GetPayment(ctx, id)
		if err == nil {
			if p.Amount != "12.50" {
				t.Fatalf("payment of order %d: amount %q, want 12.50", id, p.Amount)
			}
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) || time.Now().After(deadline) {
			t.Fatalf("payment of order %d: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the table until the deadline
	}
}

// TestPaymentAppliedOnce delivers the same OrderPaid twice, and a third
// whose handler fails, to the payments consumer: the first writes the
// payment row and the inbox marker in one pgx transaction, the repeat
// writes nothing, and the failure leaves neither row nor marker behind.
func TestPaymentAppliedOnce(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	payments, err := NewPayments(pool)
	if err != nil {
		t.Fatal(err)
	}
	handle := payments.HandlerFunc()
	paid := func(orderID string) *message.Message {
		env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), orders.NewOrderPaid(runtime.SystemClock{}, "7.25"), "Order", orderID)
		if err != nil {
			t.Fatal(err)
		}
		m := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
		m.Metadata = env.Metadata()
		return m
	}
	count := func(table string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	m := paid("41")
	for i := range 2 {
		if err := handle(m.Copy()); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if n := count("payments"); n != 1 {
		t.Fatalf("%d payment rows after two deliveries of one event, want 1", n)
	}
	if n := count("outbox_inbox"); n != 1 {
		t.Fatalf("%d inbox markers after two deliveries of one event, want 1", n)
	}
	// An aggregate id the handler cannot parse: it fails every run, and
	// its transaction, marker included, rolls back each time.
	if err := handle(paid("not-a-number")); err == nil {
		t.Fatal("a failing handler's delivery returned no error")
	}
	if p, i := count("payments"), count("outbox_inbox"); p != 1 || i != 1 {
		t.Fatalf("after a failing handler: %d payments, %d markers, want 1 and 1", p, i)
	}
}

// TestFailedTransactionWritesNoEvent: a PayOrder whose query fails (no
// such order) rolls its transaction back, event included.
func TestFailedTransactionWritesNoEvent(t *testing.T) {
	ctx := context.Background()
	pool := migratedPool(t)
	svc, err := NewService(pool)
	if err != nil {
		t.Fatal(err)
	}
	id, err := svc.PlaceOrder(ctx, "3.00")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.PayOrder(ctx, id+1000); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("PayOrder(no such order) = %v, want pgx.ErrNoRows", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d outbox rows, want 1 (the placed order's; the failed payment's rolled back)", n)
	}
}

// migratedPool returns a pool on a test database of its own holding the
// service's tables and the outbox and inbox tables, closed at the test's
// end.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, hookstest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	if err := migrateOutbox(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
