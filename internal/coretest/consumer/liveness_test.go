package consumer_test

// Liveness of the inbox: a consumer whose database connection goes
// half-open recovers by itself, through a loopback fault proxy
// (runtimetest.Proxy) between the consumer and PostgreSQL or MySQL/MariaDB.

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// The tests of this file bound how soon the pipeline recovers from a fault,
// so they run alone in the package: not beside its parallel tests (see
// TestMain), whose load on a 2-core machine under -race would stretch
// the recovery past its bound.

// TestHalfOpenInboxConnectionRecovers: a consumer applies a stream of events
// from Kafka with its inbox on PostgreSQL or MariaDB, through a proxy. Twice, every
// connection of the consumer goes half-open (bytes vanish, nothing is
// closed: a dropped NAT entry). The first cut is made inside a handler,
// after the inbox marker was inserted, so the server keeps that transaction
// open with the marker's row lock; the second lands wherever the consumer
// is. Each time the consumer applies every event exactly once, in order per
// aggregate, within 5 TxTimeouts of the cut, and dead-letters nothing. On
// PostgreSQL the server ends the abandoned transaction through SET LOCAL
// idle_in_transaction_session_timeout; on MariaDB through the session's
// wait_timeout, set for the transaction. A third cut lands on a COMMIT,
// which go-sql-driver/mysql sends without a context: the attempt gives
// that transaction up a second after TxTimeout.
func TestHalfOpenInboxConnectionRecovers(t *testing.T) {
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var admin, viaProxy *gorm.DB
			var proxy *runtimetest.Proxy
			if name == "postgres" {
				dsn := hookstest.PostgresDSN(t)
				admin = openPostgres(t, dsn)
				u, err := url.Parse(dsn)
				must(t, err)
				proxy = runtimetest.StartProxy(t, u.Host)
				u.Host = proxy.Addr()
				viaProxy = openPostgres(t, u.String())
			} else {
				dsn := hookstest.MySQLDSN(t)
				admin = gormOn(t, gormmysql.Open(dsn))
				cfg, err := mysql.ParseDSN(dsn)
				must(t, err)
				proxy = runtimetest.StartProxy(t, cfg.Addr)
				cfg.Addr = proxy.Addr()
				viaProxy = gormOn(t, gormmysql.Open(cfg.FormatDSN()))
			}
			prepare(t, admin)
			halfOpenRecovers(t, admin, viaProxy, proxy)
		})
	}
}

func halfOpenRecovers(t *testing.T, admin, viaProxy *gorm.DB, proxy *runtimetest.Proxy) {
	const (
		txTimeout = time.Second
		orders    = 10
		perPhase  = 100
	)

	b := newBroker(t, 1)
	var o outcomes
	dlq := &recordingPublisher{}
	drv := driver(t, viaProxy)
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{
		Name: "billing", DB: drv, TxTimeout: txTimeout,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, NackDelay: 50 * time.Millisecond,
		DeadLetterPublisher: dlq, OnOutcome: o.record,
	})
	// The handler signals cut when it reaches the event at index cutAt of
	// the stream, the first time: in phase 1 after the marker insert, and
	// waits for the cut before its own write; in phase 2 without waiting.
	var (
		stream  []*message.Message
		mu      sync.Mutex
		cutAt   = map[string]int{} // event id → phase; guarded by mu
		cut     = make(chan int, 1)
		resumed = make(chan struct{})
	)
	write := writeEffect("billing")
	must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		mu.Lock()
		phase := cutAt[m.EventID.String()]
		delete(cutAt, m.EventID.String())
		mu.Unlock()
		if phase > 0 {
			cut <- phase
			if phase == 1 {
				<-resumed
			}
		}
		return write(ctx, tx, e, m)
	}))
	seq := map[string]int{}
	publish := func(phase int) {
		var msgs []*message.Message
		for i := range perPhase {
			order := orderName(i % orders)
			seq[order]++
			msgs = append(msgs, paidMessage(t, 2, order, seq[order]))
		}
		mu.Lock()
		cutAt[msgs[perPhase/2].UUID] = phase
		mu.Unlock()
		stream = append(stream, msgs...)
		must(t, b.publisher(t).Publish(b.topic, msgs...))
	}
	applied := func() int64 { return count(t, admin, "effects") }

	// Phase 1.
	publish(1)
	runRouter(t, c, b.subscriber(t, "billing"), b.topic)
	select {
	case <-cut:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer did not reach the cut (%d applied)", applied())
	}
	if n := proxy.Blackhole(); n == 0 {
		t.Fatal("the consumer has no connection to cut")
	}
	start := time.Now()
	close(resumed)
	took := waitApplied(t, applied, int64(perPhase), start, 5*txTimeout, "after a cut inside a transaction")
	t.Logf("phase 1: every event applied %v after the connection went half-open inside a transaction (TxTimeout %v)", took, txTimeout)

	// Phase 2: a cut wherever the consumer is when the test gets the
	// signal.
	publish(2)
	select {
	case <-cut:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer did not reach the second cut (%d applied)", applied())
	}
	start = time.Now()
	n := proxy.Blackhole()
	took = waitApplied(t, applied, int64(2*perPhase), start, 5*txTimeout, "after a cut mid-stream")
	t.Logf("phase 2: every event applied %v after %d connection(s) went half-open mid-stream", took, n)

	// Phase 3: the cut lands on a COMMIT, which go-sql-driver/mysql sends
	// without a context: the attempt waited on it for good (a new user's
	// trial on MariaDB), until it gave the transaction up.
	fired := proxy.BlackholeWhen(func(b []byte) bool { return bytes.Contains(bytes.ToLower(b), []byte("commit")) })
	publish(0)
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatalf("no COMMIT went through the proxy (%d applied)", applied())
	}
	start = time.Now()
	took = waitApplied(t, applied, int64(3*perPhase), start, 10*txTimeout, "after a cut at a COMMIT")
	t.Logf("phase 3: every event applied %v after a connection went half-open at its COMMIT", took)

	// Exactly once, in order per aggregate, nothing dead-lettered.
	effs := effects(t, admin)
	want := map[string]bool{}
	for _, m := range stream {
		want[m.UUID] = true
	}
	got := map[string]bool{}
	last := map[string]int{}
	for _, e := range effs {
		if got[e.EventID] {
			t.Errorf("event %s applied twice", e.EventID)
		}
		got[e.EventID] = true
		if e.Seq != last[e.OrderID]+1 {
			t.Errorf("order %s: seq %d applied after %d", e.OrderID, e.Seq, last[e.OrderID])
		}
		last[e.OrderID] = e.Seq
	}
	for id := range want {
		if !got[id] {
			t.Errorf("event %s not applied", id)
		}
	}
	if n := count(t, admin, consumer.DefaultTable); n != int64(len(stream)) {
		t.Errorf("inbox entries = %d, want %d", n, len(stream))
	}
	if n := len(dlq.topic("billing.dlq")); n != 0 {
		t.Errorf("dead-lettered %d messages during a database fault", n)
	}
	retried := 0
	o.mu.Lock()
	for _, r := range o.results {
		if r.Meta.Attempt > 1 {
			retried++
		}
	}
	o.mu.Unlock()
	if retried == 0 {
		t.Error("no delivery needed a second attempt: the cuts hit nothing")
	}
	t.Logf("outcomes %v; %d deliveries applied on a retry", o.counts(), retried)
}

// waitApplied polls until applied reaches want, failing t when that takes
// longer than bound after start: the liveness bound under test.
func waitApplied(t *testing.T, applied func() int64, want int64, start time.Time, bound time.Duration, what string) time.Duration {
	t.Helper()
	for {
		n := applied()
		if n >= want {
			return time.Since(start).Round(time.Millisecond)
		}
		if time.Since(start) > bound {
			t.Fatalf("%s: %d of %d events applied after %v", what, n, want, bound)
		}
		time.Sleep(20 * time.Millisecond) // polling a database
	}
}

func openPostgres(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(fmt.Errorf("open %s: %w", dsn, err))
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	return db
}
