package main

import (
	"context"
	"fmt"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"net"
	"net/url"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// postgresDB is the suite's PostgreSQL: a schema per run, the relays named
// by application_name, pg_terminate_backend for the terminate fault.
type postgresDB struct{}

func (postgresDB) name() string { return "postgres" }

func (postgresDB) dialector(dsn string) gorm.Dialector { return postgres.Open(dsn) }

// create makes schema name in the database of base and returns a DSN
// whose search_path is that schema.
func (postgresDB) create(ctx context.Context, base, name string) (string, func() error, error) {
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		var sqlDB interface{ PingContext(context.Context) error }
		if sqlDB, err = admin.DB(); err == nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = sqlDB.PingContext(pctx)
			cancel()
		}
	}
	if err != nil {
		return "", nil, fmt.Errorf("%w: PostgreSQL: %w", errUnavailable, err)
	}
	if err := admin.WithContext(ctx).Exec("CREATE SCHEMA " + name).Error; err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("parse DSN: %w", err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	drop := func() error {
		defer func() {
			if db, err := admin.DB(); err == nil {
				db.Close()
			}
		}()
		if err := admin.Exec("DROP SCHEMA " + name + " CASCADE").Error; err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		return nil
	}
	return u.String(), drop, nil
}

func (postgresDB) proxyTarget(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("the relays' database proxy needs a URL DSN with a TCP host (%v)", err)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432"), nil
	}
	return u.Host, nil
}

func (postgresDB) relayDSN(dsn, addr, app string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse DSN: %w", err)
	}
	u.Host = addr
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (postgresDB) ledgerDDL() []string {
	return []string{
		`CREATE TABLE cs_ledger (
		event_id uuid PRIMARY KEY,
		aggregate_id text NOT NULL,
		tx_id bigint NOT NULL,
		seq int NOT NULL,
		writer int NOT NULL)`,
		`CREATE TABLE cs_commits (
		tx_id bigint PRIMARY KEY,
		writer int NOT NULL,
		before_ns bigint NOT NULL,
		after_ns bigint NOT NULL)`,
	}
}

func (postgresDB) ignoreDuplicate() string { return " ON CONFLICT DO NOTHING" }

func (postgresDB) uuidText(col string) string { return col + "::text" }

// published: the queue's mark (the polling relay's) does not write the
// row, pgcdc's sets published_at.
func (postgresDB) published() string {
	return "(published_at IS NOT NULL OR (parked_at IS NULL AND id NOT IN (SELECT qid FROM " + sqlstore.QueueTable(sqlstore.DefaultTable) + ")))"
}

func (postgresDB) clockSQL() string { return `SELECT clock_timestamp()` }

// terminate ends every relay backend with pg_terminate_backend, found by
// the relays' application_name (the CDC relays' start with it).
func (postgresDB) terminate(ctx context.Context, db *gorm.DB, app string, _ *runtimetest.Proxy) (int64, error) {
	var n int64
	err := db.WithContext(ctx).Raw(`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE left(application_name, length(?)) = ?) t`, app, app).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("terminate relay backends: %w", err)
	}
	return n, nil
}
