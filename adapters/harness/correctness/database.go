package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// suiteDB is the database that holds the run's accounts, ledger and outbox
// (the writers' and the relays' database), one implementation per database:
// postgresDB (database_postgres.go) and mysqlDB (database_mysql.go, MySQL 8
// or MariaDB). The consumer's inbox and apply log are on PostgreSQL in
// every case (see consumerDatabase).
type suiteDB interface {
	// name is the -db value: "postgres" or "mysql".
	name() string
	// dialector opens dsn with GORM.
	dialector(dsn string) gorm.Dialector
	// create makes a fresh schema (PostgreSQL) or database (MySQL) named
	// name on the server of base and returns a DSN that uses it, and a
	// function that drops it. A server that does not answer is reported
	// wrapping errUnavailable.
	create(ctx context.Context, base, name string) (dsn string, drop func() error, err error)
	// proxyTarget is the TCP address of dsn's server, for the fault proxy.
	proxyTarget(dsn string) (string, error)
	// relayDSN is dsn through the proxy at addr, with app naming the
	// relays' connections where the database can (PostgreSQL's
	// application_name).
	relayDSN(dsn, addr, app string) (string, error)
	// ledgerDDL creates the ledger and the commit windows.
	ledgerDDL() []string
	// ignoreDuplicate is the INSERT suffix that skips a row whose key
	// exists (the ledger row of an event committed by an earlier save).
	ignoreDuplicate() string
	// uuidText reads a UUID column as text.
	uuidText(col string) string
	// published is the WHERE condition of the outbox rows published.
	published() string
	// clockSQL reads the clock that writes the outbox's created_at.
	clockSQL() string
	// terminate ends, on the server's side, every connection of the
	// relays (named app, through proxy) and returns how many it ended.
	terminate(ctx context.Context, db *gorm.DB, app string, proxy *runtimetest.Proxy) (int64, error)
}

// databaseOf returns the suiteDB of a -db value.
func databaseOf(name string) (suiteDB, error) {
	switch name {
	case "", "postgres":
		return postgresDB{}, nil
	case "mysql":
		return mysqlDB{}, nil
	}
	return nil, fmt.Errorf("-db %q: want postgres or mysql", name)
}

// randomName returns prefix followed by 10 random hex digits.
func randomName(prefix string) (string, error) {
	b := make([]byte, 5)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("random name: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}
