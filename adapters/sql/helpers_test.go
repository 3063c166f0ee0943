package sql_test

import (
	"context"
	stdSQL "database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/adapters/sql"
	"github.com/gooutbox/outbox/hooks/hookstest"
)

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 30 * time.Second

// newDB returns a database handle on a fresh schema of the test PostgreSQL
// (OUTBOX_TEST_POSTGRES_DSN, see hookstest.PostgresDSN), closed and dropped
// when t ends. maxConns bounds its pool (0: no bound).
func newDB(t testing.TB, maxConns int) *stdSQL.DB {
	t.Helper()
	dsn := hookstest.PostgresDSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	return db
}

// testSubscriberConfig returns a subscriber config with short intervals, so
// the suite runs in seconds.
func testSubscriberConfig(group string) sql.SubscriberConfig {
	return sql.SubscriberConfig{
		ConsumerGroup:  group,
		PollInterval:   10 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
		ResendInterval: 10 * time.Millisecond,
	}
}

func newPublisher(t testing.TB, db *stdSQL.DB) *sql.Publisher {
	t.Helper()
	pub, err := sql.NewPublisher(db, sql.PublisherConfig{})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

func newSubscriber(t testing.TB, db *stdSQL.DB, cfg sql.SubscriberConfig) *sql.Subscriber {
	t.Helper()
	sub, err := sql.NewSubscriber(db, cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}
