package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// mysqlDB is the suite's MySQL 8 or MariaDB: a database per run, opened
// with what the outbox needs (parseTime=true, clientFoundRows=true; see
// hookstest.MySQLDSN); MySQL has no application_name, so the terminate
// fault finds the relays' connections by the proxy's ports, and kills
// them with KILL CONNECTION.
type mysqlDB struct{}

func (mysqlDB) name() string { return "mysql" }

func (mysqlDB) dialector(dsn string) gorm.Dialector { return gormmysql.Open(dsn) }

// create makes database name on the server of base and returns a DSN for
// it.
func (mysqlDB) create(ctx context.Context, base, name string) (string, func() error, error) {
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		return "", nil, fmt.Errorf("parse MySQL DSN: %w", err)
	}
	cfg.DBName = ""
	cfg.ParseTime = true
	cfg.ClientFoundRows = true
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = admin.PingContext(pctx)
		cancel()
	}
	if err != nil {
		return "", nil, fmt.Errorf("%w: MySQL at %s: %w", errUnavailable, cfg.Addr, err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	cfg.DBName = name
	drop := func() error {
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return cfg.FormatDSN(), drop, nil
}

func (mysqlDB) proxyTarget(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse MySQL DSN: %w", err)
	}
	if cfg.Net != "tcp" {
		return "", fmt.Errorf("the relays' database proxy needs a TCP MySQL DSN, not %s", cfg.Net)
	}
	return cfg.Addr, nil
}

func (mysqlDB) relayDSN(dsn, addr, _ string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse MySQL DSN: %w", err)
	}
	cfg.Addr = addr
	// As the README asks of a relay on MySQL: go-sql-driver's COMMIT and
	// ROLLBACK take no context, so without a read deadline a relay whose
	// connection turned half-open inside a lease transaction waits for TCP
	// to give up. The relays' StoreTimeout bounds every other call already.
	cfg.ReadTimeout, cfg.WriteTimeout = relayStoreTimeout, relayStoreTimeout
	return cfg.FormatDSN(), nil
}

func (mysqlDB) ledgerDDL() []string {
	return []string{
		`CREATE TABLE cs_ledger (
		event_id CHAR(36) CHARACTER SET ascii PRIMARY KEY,
		aggregate_id VARCHAR(255) NOT NULL,
		tx_id BIGINT NOT NULL,
		seq INT NOT NULL,
		writer INT NOT NULL)`,
		`CREATE TABLE cs_commits (
		tx_id BIGINT PRIMARY KEY,
		writer INT NOT NULL,
		before_ns BIGINT NOT NULL,
		after_ns BIGINT NOT NULL)`,
	}
}

func (mysqlDB) ignoreDuplicate() string { return " ON DUPLICATE KEY UPDATE event_id = event_id" }

func (mysqlDB) uuidText(col string) string { return col }

func (mysqlDB) published() string { return "published_at IS NOT NULL" }

func (mysqlDB) clockSQL() string { return `SELECT UTC_TIMESTAMP(6)` }

// terminate kills the connections of this database whose client port is
// one of the proxy's connections to the server: the relays'.
func (mysqlDB) terminate(ctx context.Context, db *gorm.DB, _ string, proxy *runtimetest.Proxy) (int64, error) {
	ports := map[string]bool{}
	for _, a := range proxy.ServerAddrs() {
		if _, port, err := net.SplitHostPort(a); err == nil {
			ports[port] = true
		}
	}
	var rows []struct {
		ID   int64
		Host string
	}
	err := db.WithContext(ctx).Raw(`SELECT id, host FROM information_schema.processlist WHERE db = DATABASE()`).Scan(&rows).Error
	if err != nil {
		return 0, fmt.Errorf("find relay connections: %w", err)
	}
	var n int64
	for _, r := range rows {
		if _, port, err := net.SplitHostPort(r.Host); err != nil || !ports[port] {
			continue
		}
		// A connection that ended meanwhile is "unknown": not counted.
		if err := db.WithContext(ctx).Exec(fmt.Sprintf("KILL CONNECTION %d", r.ID)).Error; err == nil {
			n++
		}
	}
	return n, nil
}
