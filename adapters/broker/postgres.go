package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/adapters/sql"
)

// openPostgres opens postgres://user@host:5432/db?... (postgresql:// too):
// the URL is the database's DSN, passed to pgx as it is, so every pgx and
// libpq parameter works (sslmode, search_path, connect_timeout, ...). Topics
// are tables in that database (see package adapters/sql); a group is
// watermill-sql's consumer group. The publisher and the subscribers share one
// connection pool, opened here and closed by [Broker.Close]. Parameters
// named outbox_* are this package's; there are none yet, so any is an error.
func openPostgres(_ context.Context, u *url.URL, logger *slog.Logger) (*Broker, error) {
	for k := range u.Query() {
		if strings.HasPrefix(k, "outbox_") {
			return nil, fmt.Errorf("%w: unknown parameter %q for %s:// (parameters other than outbox_* go to the database driver)", ErrInvalidURL, k, u.Scheme)
		}
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	db := stdlib.OpenDB(*cfg)
	pub, err := sql.NewPublisher(db, sql.PublisherConfig{Logger: logger})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Broker{
		guarantees: Guarantees{OrderPerAggregate: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		publisher:  pub,
		subscriber: func(group string) (message.Subscriber, error) {
			return sql.NewSubscriber(db, sql.SubscriberConfig{ConsumerGroup: group, Logger: logger})
		},
		closers: []func() error{db.Close},
	}, nil
}
