package sql

import (
	"context"
	gosql "database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers the package's URL schemes with package adapters/broker,
// so that importing the package is all broker.Open needs.
func init() {
	broker.Register("postgres", openPostgres)
	broker.Register("postgresql", openPostgres)
}

// openPostgres opens postgres://user@host:5432/db?... (postgresql:// too):
// the URL is the database's DSN, passed to pgx as it is, so every pgx and
// libpq parameter works (sslmode, search_path, connect_timeout, ...). Topics
// are tables in that database (see package adapters/sql); a group is
// watermill-sql's consumer group. The publisher and the subscribers share one
// connection pool, opened here and closed by [broker.Broker.Close]. Parameters
// named outbox_* are this package's; there are none yet, so any is an error.
// It connects once (see checkPostgres) to find what the URL gets wrong
// before the first publish does.
func openPostgres(ctx context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	for k := range u.Query() {
		if strings.HasPrefix(k, "outbox_") {
			return nil, fmt.Errorf("%w: unknown parameter %q for %s:// (parameters other than outbox_* go to the database driver)", broker.ErrInvalidURL, k, u.Scheme)
		}
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", broker.ErrInvalidURL, err)
	}
	db := stdlib.OpenDB(*cfg)
	if err := checkPostgres(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %w", broker.ErrInvalidURL, u.Redacted(), err)
	}
	pub, err := NewPublisher(db, PublisherConfig{Logger: logger})
	if err != nil {
		db.Close()
		return nil, err
	}
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			return NewSubscriber(db, SubscriberConfig{ConsumerGroup: group, Logger: logger})
		},
		Closers: []func() error{db.Close},
	}), nil
}

// postgresCheckTimeout bounds checkPostgres's connection.
const postgresCheckTimeout = 5 * time.Second

// checkPostgres connects to the database once, within postgresCheckTimeout,
// and returns the server's refusal when it is one that no retry mends,
// which would otherwise fail every publish, retried forever: a parameter
// the server does not know (a typo such as statment_timeout=5s, which pgx
// passes on as a server setting), a value it refuses, a database that does
// not exist, credentials it rejects. A server that cannot be reached is not
// an error here: the publisher connects when it publishes, and retries.
func checkPostgres(ctx context.Context, db *gosql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, postgresCheckTimeout)
	defer cancel()
	err := db.PingContext(ctx)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return nil
	}
	switch pg.Code {
	case "42704", // undefined_object: unrecognized configuration parameter
		"22023", // invalid_parameter_value
		"3D000", // invalid_catalog_name: the database does not exist
		"28000", // invalid_authorization_specification
		"28P01": // invalid_password
		return err
	}
	return nil
}
