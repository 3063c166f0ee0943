package consumer_test

// The *sql.Tx API (HandleTx with Config.SQLDB): a consumer built on a
// database/sql pool, with no GORM in the consumer, on each database; and the
// duplicate-key semantics of the inbox marker under concurrent deliveries.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/glebarez/sqlite"
	"github.com/google/go-cmp/cmp"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// sqlDB is a database opened with database/sql alone, plus a GORM handle on
// the same database for the test's own reads (effects, inbox entries).
type sqlDB struct {
	db      *sql.DB
	dialect string // Config.Dialect
	gorm    *gorm.DB
}

// sqlDatabases returns each database the inbox supports, opened with
// sql.Open (drivers "pgx", "sqlite", "mysql"), migrated with MigrateSQL,
// with the effects table.
func sqlDatabases(t *testing.T) map[string]func(t *testing.T) sqlDB {
	t.Helper()
	open := func(t *testing.T, driver, dsn, dialect string, g *gorm.DB) sqlDB {
		t.Helper()
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatalf("sql.Open(%q): %v", driver, err)
		}
		t.Cleanup(func() { db.Close() })
		must(t, consumer.MigrateSQL(context.Background(), db, dialect, ""))
		must(t, consumer.MigrateSQL(context.Background(), db, dialect, "")) // idempotent
		must(t, g.AutoMigrate(&Effect{}))
		return sqlDB{db: db, dialect: dialect, gorm: g}
	}
	return map[string]func(t *testing.T) sqlDB{
		"postgres": func(t *testing.T) sqlDB {
			dsn := hookstest.PostgresDSN(t)
			return open(t, "pgx", dsn, "pgx", gormOn(t, postgres.Open(dsn)))
		},
		"sqlite": func(t *testing.T) sqlDB {
			dsn := hookstest.SQLiteDSN(filepath.Join(t.TempDir(), "inbox.db"))
			return open(t, "sqlite", dsn, "sqlite", gormOn(t, sqlite.Open(dsn)))
		},
		"mysql": func(t *testing.T) sqlDB {
			dsn := hookstest.MySQLDSN(t)
			return open(t, "mysql", dsn, "mysql", gormOn(t, gormmysql.Open(dsn)))
		},
	}
}

// gormOn opens GORM on dsn, closed when t ends.
func gormOn(t *testing.T, d gorm.Dialector) *gorm.DB {
	t.Helper()
	g, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := g.DB(); err == nil {
			db.Close()
		}
	})
	return g
}

// writeEffectTx is writeEffect through a *sql.Tx.
func writeEffectTx(name, dialect string) func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
	q := "INSERT INTO effects (consumer, event_id, order_id, seq, currency, version) VALUES (?, ?, ?, ?, ?, ?)"
	if dialect == "pgx" || dialect == "postgres" {
		q = "INSERT INTO effects (consumer, event_id, order_id, seq, currency, version) VALUES ($1, $2, $3, $4, $5, $6)"
	}
	return func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
		_, err := tx.ExecContext(ctx, q, name, m.EventID.String(), e.OrderID, e.Seq, e.Currency, m.EventVersion)
		return err
	}
}

func TestHandleTxAppliesOnce(t *testing.T) {
	t.Parallel()
	for name, open := range sqlDatabases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", SQLDB: d.db, Dialect: d.dialect, OnOutcome: o.record})
			must(t, consumer.HandleTx(c, writeEffectTx("billing", d.dialect)))
			if err := consumer.Handle(c, writeEffect("billing")); !errors.Is(err, consumer.ErrInvalidHandler) {
				t.Errorf("Handle without Config.DB = %v, want ErrInvalidHandler", err)
			}

			v1, v2 := paidMessage(t, 1, "o-1", 1), paidMessage(t, 2, "o-2", 1)
			for _, msg := range []*message.Message{v1, v2, redeliver(v1), redeliver(v2), redeliver(v1)} {
				must(t, c.HandlerFunc()(msg))
			}
			if diff := cmp.Diff(map[string]int{"applied": 2, "duplicate": 3}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			got := effects(t, d.gorm)
			for i := range got {
				got[i].ID = 0
			}
			want := []Effect{
				{Consumer: "billing", EventID: v1.UUID, OrderID: "o-1", Seq: 1, Currency: "EUR", Version: 1},
				{Consumer: "billing", EventID: v2.UUID, OrderID: "o-2", Seq: 1, Currency: "USD", Version: 2},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("effects (-want +got):\n%s", diff)
			}
			if n := count(t, d.gorm, consumer.DefaultTable); n != 2 {
				t.Errorf("inbox entries = %d, want 2", n)
			}

			// Pruning works on the database/sql pool too.
			pruner := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", SQLDB: d.db, Dialect: d.dialect, InboxRetention: time.Nanosecond})
			if n, err := pruner.PruneInbox(context.Background()); err != nil || n != 2 {
				t.Errorf("PruneInbox = %d, %v; want 2", n, err)
			}
		})
	}
}

// TestHandleTxBesideGORM: a consumer configured with a *gorm.DB takes
// *sql.Tx handlers too, on the same pool.
func TestHandleTxBesideGORM(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: db})
			dialect := db.Dialector.Name()
			must(t, consumer.HandleTx(c, writeEffectTx("c", dialect)))
			msg := paidMessage(t, 2, "o-1", 1)
			must(t, c.HandlerFunc()(msg))
			must(t, c.HandlerFunc()(redeliver(msg)))
			if n := len(effects(t, db)); n != 1 {
				t.Errorf("effects = %d, want 1", n)
			}
		})
	}
}

// TestHandleTxRetriedAfterErrorAppliesOnce: the failed attempts (a panic,
// an error after a write) roll back, effects and marker, and the attempt
// that succeeds commits one effect; a redelivery then is a duplicate.
func TestHandleTxRetriedAfterErrorAppliesOnce(t *testing.T) {
	t.Parallel()
	for name, open := range sqlDatabases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", SQLDB: d.db, Dialect: d.dialect, OnOutcome: o.record,
				MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
			write := writeEffectTx("c", d.dialect)
			var attempts []int
			must(t, consumer.HandleTx(c, func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
				attempts = append(attempts, m.Attempt)
				if err := write(ctx, tx, e, m); err != nil {
					return err
				}
				switch m.Attempt {
				case 1:
					panic("first attempt panics")
				case 2:
					return errBoom
				}
				return nil
			}))
			msg := paidMessage(t, 2, "o-1", 1)
			must(t, c.HandlerFunc()(msg))
			must(t, c.HandlerFunc()(redeliver(msg)))
			if diff := cmp.Diff([]int{1, 2, 3}, attempts); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]int{"applied": 1, "duplicate": 1}, o.counts()); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			if n := len(effects(t, d.gorm)); n != 1 {
				t.Errorf("effects = %d, want 1 (failed attempts rolled back)", n)
			}
			if n := count(t, d.gorm, consumer.DefaultTable); n != 1 {
				t.Errorf("inbox entries = %d, want 1", n)
			}
		})
	}
}

// TestSameEventDeliveredTwiceAtOnce: while the first delivery of an event
// holds its inbox transaction open, a second delivery of the same event
// waits for it (on the marker's primary key) and then sees its outcome: a
// duplicate when the first commits, an application of its own when the
// first rolls back. On PostgreSQL and MySQL the test sees the second
// delivery waiting on the lock before it lets the first finish; SQLite has
// no such view (the second waits on the database's write lock).
func TestSameEventDeliveredTwiceAtOnce(t *testing.T) {
	t.Parallel()
	var tables atomic.Int32
	for _, api := range []string{"gorm", "sql"} {
		for name, open := range databases(t) {
			for _, firstFails := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/first_fails=%v", api, name, firstFails), func(t *testing.T) {
					t.Parallel()
					db := open(t)
					// A table of its own: the lock-wait query finds it by name.
					table := fmt.Sprintf("dup_inbox_%d", tables.Add(1))
					must(t, consumer.Migrate(context.Background(), db, table))
					var o outcomes
					c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: db, Table: table, OnOutcome: o.record,
						MaxRetries: -1, NackDelay: time.Millisecond})

					entered := make(chan int, 2) // the run that entered the handler
					release := make(chan struct{})
					var runs atomic.Int32
					// body is the handler: the first run waits for release,
					// then fails or succeeds; later runs succeed at once.
					body := func(ctx context.Context) (first bool, err error) {
						n := int(runs.Add(1))
						entered <- n
						if n != 1 {
							return false, nil
						}
						select {
						case <-release:
						case <-ctx.Done():
							return true, ctx.Err()
						}
						if firstFails {
							return true, errBoom
						}
						return true, nil
					}
					if api == "gorm" {
						write := writeEffect("c")
						must(t, consumer.Handle(c, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
							if err := write(ctx, tx, e, m); err != nil {
								return err
							}
							_, err := body(ctx)
							return err
						}))
					} else {
						write := writeEffectTx("c", db.Dialector.Name())
						must(t, consumer.HandleTx(c, func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
							if err := write(ctx, tx, e, m); err != nil {
								return err
							}
							_, err := body(ctx)
							return err
						}))
					}

					msg := paidMessage(t, 2, "o-1", 1)
					errs := make([]error, 2)
					var wg sync.WaitGroup
					wg.Go(func() { errs[0] = c.HandlerFunc()(redeliver(msg)) })
					if n := <-entered; n != 1 {
						t.Fatalf("first run = %d", n)
					}
					// The first delivery holds its marker; start the second.
					wg.Go(func() { errs[1] = c.HandlerFunc()(redeliver(msg)) })
					waitForLockWait(t, db, table)
					select {
					case n := <-entered:
						t.Fatalf("run %d entered the handler while the first held the marker", n)
					default:
					}
					close(release)
					wg.Wait()

					wantRuns, wantCounts := 1, map[string]int{"applied": 1, "duplicate": 1}
					if firstFails {
						wantRuns, wantCounts = 2, map[string]int{"applied": 1, "failed": 1}
					}
					if got := int(runs.Load()); got != wantRuns {
						t.Errorf("handler runs = %d, want %d", got, wantRuns)
					}
					if diff := cmp.Diff(wantCounts, o.counts()); diff != "" {
						t.Errorf("outcomes (-want +got):\n%s", diff)
					}
					if firstFails != (errs[0] != nil) || errs[1] != nil {
						t.Errorf("deliveries returned %v, %v", errs[0], errs[1])
					}
					if n := len(effects(t, db)); n != 1 {
						t.Errorf("effects = %d, want 1", n)
					}
					if n := count(t, db, table); n != 1 {
						t.Errorf("inbox entries = %d, want 1", n)
					}
				})
			}
		}
	}
}

// waitForLockWait polls until an insert into table waits for a lock (on
// PostgreSQL; on MySQL/MariaDB until one is in flight; on SQLite it returns
// at once), failing t after 10s.
func waitForLockWait(t *testing.T, db *gorm.DB, table string) {
	t.Helper()
	var q string
	switch db.Dialector.Name() {
	case "postgres":
		q = `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()
			AND application_name = current_setting('application_name')
			AND query LIKE '%INSERT INTO ` + table + ` %' AND pid <> pg_backend_pid()`
	case "mysql":
		// MariaDB does not list the waiting insert in
		// information_schema.innodb_trx; an insert of the marker still in
		// flight is waiting for the first delivery's.
		q = `SELECT count(*) FROM information_schema.processlist
			WHERE db = DATABASE() AND info LIKE '%INTO ` + table + ` %' AND id <> CONNECTION_ID()`
	default:
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int64
		if err := db.Raw(q).Scan(&n).Error; err != nil {
			t.Fatalf("lock waits: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the second delivery never waited on the first's marker")
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestConfigDatabases covers the database fields: DB or SQLDB, Dialect.
func TestConfigDatabases(t *testing.T) {
	t.Parallel()
	sqlite := nil2sqlite(t)
	pool, err := sqlite.DB()
	must(t, err)
	for _, tc := range []struct {
		name string
		cfg  consumer.Config
		want error
	}{
		{"SQLDB without Dialect", consumer.Config{Name: "c", SQLDB: pool}, consumer.ErrInvalidConfig},
		{"SQLDB with an unknown Dialect", consumer.Config{Name: "c", SQLDB: pool, Dialect: "oracle"}, consumer.ErrUnsupportedDialect},
		{"DB and SQLDB", consumer.Config{Name: "c", DB: sqlite, SQLDB: pool, Dialect: "sqlite"}, consumer.ErrInvalidConfig},
		{"Dialect without SQLDB", consumer.Config{Name: "c", Dialect: "sqlite"}, consumer.ErrInvalidConfig},
		{"Dialect other than DB's", consumer.Config{Name: "c", DB: sqlite, Dialect: "mysql"}, consumer.ErrInvalidConfig},
		{"DB with an unknown Dialect", consumer.Config{Name: "c", DB: sqlite, Dialect: "oracle"}, consumer.ErrUnsupportedDialect},
		{"Name too long for MySQL", consumer.Config{Name: strings.Repeat("é", 256), SQLDB: pool, Dialect: "mysql"}, consumer.ErrInvalidConfig},
		{"Name of 255 characters on MySQL", consumer.Config{Name: strings.Repeat("é", 255), SQLDB: pool, Dialect: "mysql"}, nil},
		{"DB with its Dialect", consumer.Config{Name: "c", DB: sqlite, Dialect: "sqlite"}, nil},
		{"SQLDB with pgx", consumer.Config{Name: "c", SQLDB: pool, Dialect: "pgx"}, nil},
	} {
		_, err := consumer.New(newRegistry(t, 2), tc.cfg)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: New = %v, want %v", tc.name, err, tc.want)
		}
	}
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c"})
	if err := consumer.HandleTx(c, writeEffectTx("c", "sqlite")); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("HandleTx without a database = %v, want ErrInvalidHandler", err)
	}
	if err := consumer.MigrateSQL(context.Background(), pool, "oracle", ""); !errors.Is(err, consumer.ErrUnsupportedDialect) {
		t.Errorf("MigrateSQL(oracle) = %v, want ErrUnsupportedDialect", err)
	}
}

// TestMySQLSessionTimeouts: on MySQL/MariaDB the inbox transaction runs
// with the session's wait_timeout and innodb_lock_wait_timeout set to
// TxTimeout (whole seconds, rounded up), and the connection goes back to
// the pool with its own values again, after a commit, a duplicate and a
// handler error alike.
func TestMySQLSessionTimeouts(t *testing.T) {
	t.Parallel()
	d := sqlDatabases(t)["mysql"](t)
	d.db.SetMaxOpenConns(1) // every statement on the one connection
	ctx := context.Background()
	_, err := d.db.ExecContext(ctx, "SET SESSION wait_timeout = 1234, SESSION innodb_lock_wait_timeout = 56")
	must(t, err)
	timeouts := func(ctx context.Context, q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) [2]int {
		var v [2]int
		must(t, q.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout, @@SESSION.innodb_lock_wait_timeout").Scan(&v[0], &v[1]))
		return v
	}
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", SQLDB: d.db, Dialect: d.dialect, TxTimeout: 2500 * time.Millisecond,
		MaxRetries: -1, NackDelay: time.Millisecond, OnOutcome: o.record})
	var inTx [][2]int
	write := writeEffectTx("c", d.dialect)
	must(t, consumer.HandleTx(c, func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
		inTx = append(inTx, timeouts(ctx, tx))
		if e.Seq == 2 {
			return errBoom
		}
		return write(ctx, tx, e, m)
	}))
	msg := paidMessage(t, 2, "o-1", 1)
	for i, m := range []*message.Message{msg, redeliver(msg), paidMessage(t, 2, "o-1", 2)} {
		err := c.HandlerFunc()(m)
		if (i == 2) != (err != nil) {
			t.Errorf("delivery %d: %v", i, err)
		}
		if got := timeouts(ctx, d.db); got != [2]int{1234, 56} {
			t.Errorf("after delivery %d: session wait_timeout, innodb_lock_wait_timeout = %v, want the session's own [1234 56]", i, got)
		}
	}
	if diff := cmp.Diff([][2]int{{3, 3}, {3, 3}}, inTx); diff != "" {
		t.Errorf("timeouts inside the handler's transaction (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"applied": 1, "duplicate": 1, "failed": 1}, o.counts()); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}
