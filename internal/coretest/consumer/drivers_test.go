package consumer_test

// The consumer on each of the storage layer's drivers, its handlers writing
// through the driver's own transaction: GORM (hooks.NewDriver, a *gorm.DB),
// database/sql (databasesql.New, a *sql.Tx) and pgx (pgxv5.New, a pgx.Tx);
// and the duplicate-key semantics of the inbox marker under concurrent
// deliveries.

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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// testDriver is a database behind one of the drivers, with the inbox table
// and the effects table, and GORM on the same database for the test's own
// reads (effects, inbox entries).
type testDriver struct {
	drv     sqlstore.DB // a consumer's Config.DB
	gorm    *gorm.DB
	dialect string // postgres, sqlite or mysql
	// handle registers on c (whose Config.DB is drv) a PaidV2 handler that
	// writes the Effect of c.Name() through the driver's own transaction
	// type, then returns then's error (then may be nil).
	handle func(c *consumer.Consumer, then func(ctx context.Context, e PaidV2, m consumer.Meta) error) error
}

// then calls fn, if set.
func then(fn func(ctx context.Context, e PaidV2, m consumer.Meta) error, ctx context.Context, e PaidV2, m consumer.Meta) error {
	if fn == nil {
		return nil
	}
	return fn(ctx, e, m)
}

// effectInsert is the INSERT of an Effect in dialect, for the handlers
// that write without GORM.
func effectInsert(dialect string) string {
	if dialect == "postgres" {
		return "INSERT INTO effects (consumer, event_id, order_id, seq, currency, version) VALUES ($1, $2, $3, $4, $5, $6)"
	}
	return "INSERT INTO effects (consumer, event_id, order_id, seq, currency, version) VALUES (?, ?, ?, ?, ?, ?)"
}

// drivers returns each database the inbox supports behind each driver
// that runs on it: "gorm/…" (hooks.NewDriver), "sql/…" (databasesql.New
// on sql.Open with drivers "pgx", "sqlite", "mysql") and "pgx/postgres"
// (pgxv5.New on a pgxpool.Pool), each migrated with Migrate (twice:
// idempotent) and with the effects table.
func drivers(t *testing.T) map[string]func(t *testing.T) testDriver {
	t.Helper()
	migrate := func(t *testing.T, drv sqlstore.DB, g *gorm.DB) {
		t.Helper()
		must(t, consumer.Migrate(context.Background(), drv, ""))
		must(t, consumer.Migrate(context.Background(), drv, "")) // idempotent
		must(t, g.AutoMigrate(&Effect{}))
	}
	viaGORM := func(t *testing.T, g *gorm.DB) testDriver {
		t.Helper()
		drv := driver(t, g)
		migrate(t, drv, g)
		return testDriver{drv: drv, gorm: g, dialect: g.Dialector.Name(), handle: func(c *consumer.Consumer, fn func(context.Context, PaidV2, consumer.Meta) error) error {
			write := writeEffect(c.Name())
			return consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
				if err := write(ctx, tx, e, m); err != nil {
					return err
				}
				return then(fn, ctx, e, m)
			})
		}}
	}
	viaSQL := func(t *testing.T, driverName, dsn string, g *gorm.DB) testDriver {
		t.Helper()
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatalf("sql.Open(%q): %v", driverName, err)
		}
		t.Cleanup(func() { db.Close() })
		drv := databasesql.New(db)
		migrate(t, drv, g)
		dialect := g.Dialector.Name()
		return testDriver{drv: drv, gorm: g, dialect: dialect, handle: func(c *consumer.Consumer, fn func(context.Context, PaidV2, consumer.Meta) error) error {
			write := writeEffectTx(c.Name(), dialect)
			return consumer.Handle(c, drv, func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
				if err := write(ctx, tx, e, m); err != nil {
					return err
				}
				return then(fn, ctx, e, m)
			})
		}}
	}
	return map[string]func(t *testing.T) testDriver{
		"gorm/postgres": func(t *testing.T) testDriver { return viaGORM(t, hookstest.Postgres(t, nil)) },
		"gorm/sqlite":   func(t *testing.T) testDriver { return viaGORM(t, hookstest.SQLite(t, nil)) },
		"gorm/mysql":    func(t *testing.T) testDriver { return viaGORM(t, hookstest.MariaDB(t, nil)) },
		"sql/postgres": func(t *testing.T) testDriver {
			dsn := hookstest.PostgresDSN(t)
			return viaSQL(t, "pgx", dsn, gormOn(t, postgres.Open(dsn)))
		},
		"sql/sqlite": func(t *testing.T) testDriver {
			dsn := hookstest.SQLiteDSN(filepath.Join(t.TempDir(), "inbox.db"))
			return viaSQL(t, "sqlite", dsn, gormOn(t, sqlite.Open(dsn)))
		},
		"sql/mysql": func(t *testing.T) testDriver {
			dsn := hookstest.MySQLDSN(t)
			return viaSQL(t, "mysql", dsn, gormOn(t, gormmysql.Open(dsn)))
		},
		"pgx/postgres": func(t *testing.T) testDriver {
			dsn := hookstest.PostgresDSN(t)
			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			drv := pgxv5.New(pool)
			g := gormOn(t, postgres.Open(dsn))
			migrate(t, drv, g)
			q := effectInsert("postgres")
			return testDriver{drv: drv, gorm: g, dialect: "postgres", handle: func(c *consumer.Consumer, fn func(context.Context, PaidV2, consumer.Meta) error) error {
				return consumer.Handle(c, drv, func(ctx context.Context, tx pgx.Tx, e PaidV2, m consumer.Meta) error {
					if _, err := tx.Exec(ctx, q, c.Name(), m.EventID.String(), e.OrderID, e.Seq, e.Currency, m.EventVersion); err != nil {
						return err
					}
					return then(fn, ctx, e, m)
				})
			}}
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
	q := effectInsert(dialect)
	return func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
		_, err := tx.ExecContext(ctx, q, name, m.EventID.String(), e.OrderID, e.Seq, e.Currency, m.EventVersion)
		return err
	}
}

// TestHandleAppliesOnceOnEachDriver: on every driver and database, each
// event is applied once, whatever version it came in and however often it
// is delivered, its effect written through the driver's own transaction
// and committed with its inbox marker; PruneInbox works through the
// driver too.
func TestHandleAppliesOnceOnEachDriver(t *testing.T) {
	t.Parallel()
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: d.drv, OnOutcome: o.record})
			must(t, d.handle(c, nil))

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
			if n, err := c.InboxSize(context.Background()); err != nil || n != 2 {
				t.Errorf("InboxSize = %d, %v; want 2", n, err)
			}

			pruner := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: d.drv, InboxRetention: time.Nanosecond})
			if n, err := pruner.PruneInbox(context.Background()); err != nil || n != 2 {
				t.Errorf("PruneInbox = %d, %v; want 2", n, err)
			}
		})
	}
}

// TestHandleRetriedAfterErrorAppliesOnce: the failed attempts (a panic,
// an error after a write) roll back, effects and marker, and the attempt
// that succeeds commits one effect; a redelivery then is a duplicate.
func TestHandleRetriedAfterErrorAppliesOnce(t *testing.T) {
	t.Parallel()
	for name, open := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			var o outcomes
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, OnOutcome: o.record,
				MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
			var attempts []int
			must(t, d.handle(c, func(ctx context.Context, e PaidV2, m consumer.Meta) error {
				attempts = append(attempts, m.Attempt)
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
	for name, open := range drivers(t) {
		for _, firstFails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/first_fails=%v", name, firstFails), func(t *testing.T) {
				t.Parallel()
				d := open(t)
				db := d.gorm
				// A table of its own: the lock-wait query finds it by name.
				table := fmt.Sprintf("dup_inbox_%d", tables.Add(1))
				must(t, consumer.Migrate(context.Background(), d.drv, table))
				var o outcomes
				c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, Table: table, OnOutcome: o.record,
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
				must(t, d.handle(c, func(ctx context.Context, _ PaidV2, _ consumer.Meta) error {
					_, err := body(ctx)
					return err
				}))

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

// TestConfigDatabases covers Config.DB: its dialect is the driver's, a
// nil driver is refused, and Handle takes only the consumer's own driver.
func TestConfigDatabases(t *testing.T) {
	t.Parallel()
	sqliteDB := nil2sqlite(t)
	pool, err := sqliteDB.DB()
	must(t, err)
	for _, tc := range []struct {
		name string
		cfg  consumer.Config
		want error
	}{
		{"nil driver", consumer.Config{Name: "c", DB: databasesql.New(nil)}, consumer.ErrInvalidConfig},
		{"a driver of an unknown dialect", consumer.Config{Name: "c", DB: databasesql.NewWithDialect(pool, "oracle")}, consumer.ErrUnsupportedDialect},
		{"Name too long for MySQL", consumer.Config{Name: strings.Repeat("é", 256), DB: databasesql.NewWithDialect(pool, sqlstore.MySQL)}, consumer.ErrInvalidConfig},
		{"Name of 255 characters on MySQL", consumer.Config{Name: strings.Repeat("é", 255), DB: databasesql.NewWithDialect(pool, sqlstore.MySQL)}, nil},
		{"GORM", consumer.Config{Name: "c", DB: driver(t, sqliteDB)}, nil},
		{"database/sql", consumer.Config{Name: "c", DB: databasesql.New(pool)}, nil},
	} {
		_, err := consumer.New(newRegistry(t, 2), tc.cfg)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: New = %v, want %v", tc.name, err, tc.want)
		}
	}
	noop := func(context.Context, *sql.Tx, PaidV2, consumer.Meta) error { return nil }
	drv := databasesql.New(pool)
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c"})
	if err := consumer.Handle(c, drv, noop); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("Handle without a database = %v, want ErrInvalidHandler", err)
	}
	c = newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv})
	if err := consumer.Handle(c, databasesql.New(pool), noop); !errors.Is(err, consumer.ErrInvalidHandler) {
		t.Errorf("Handle with a driver other than Config.DB = %v, want ErrInvalidHandler", err)
	}
	must(t, consumer.Handle(c, drv, noop))
	if err := consumer.Migrate(context.Background(), databasesql.NewWithDialect(pool, "oracle"), ""); !errors.Is(err, consumer.ErrUnsupportedDialect) {
		t.Errorf("Migrate(oracle) = %v, want ErrUnsupportedDialect", err)
	}
	if err := consumer.Migrate(context.Background(), databasesql.New(nil), ""); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("Migrate(nil driver) = %v, want ErrInvalidConfig", err)
	}
}

// TestMySQLSessionTimeouts: on MySQL/MariaDB the inbox transaction runs
// with the session's wait_timeout and innodb_lock_wait_timeout set to
// TxTimeout (whole seconds, rounded up), and the connection goes back to
// the pool with its own values again, after a commit, a duplicate and a
// handler error alike.
func TestMySQLSessionTimeouts(t *testing.T) {
	t.Parallel()
	d := drivers(t)["sql/mysql"](t)
	db := d.drv.(*databasesql.DB).SQLDB()
	db.SetMaxOpenConns(1) // every statement on the one connection
	ctx := context.Background()
	_, err := db.ExecContext(ctx, "SET SESSION wait_timeout = 1234, SESSION innodb_lock_wait_timeout = 56")
	must(t, err)
	timeouts := func(ctx context.Context, q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) [2]int {
		var v [2]int
		must(t, q.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout, @@SESSION.innodb_lock_wait_timeout").Scan(&v[0], &v[1]))
		return v
	}
	var o outcomes
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: d.drv, TxTimeout: 2500 * time.Millisecond,
		MaxRetries: -1, NackDelay: time.Millisecond, OnOutcome: o.record})
	var inTx [][2]int
	write := writeEffectTx("c", d.dialect)
	must(t, consumer.Handle(c, d.drv.(*databasesql.DB), func(ctx context.Context, tx *sql.Tx, e PaidV2, m consumer.Meta) error {
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
		if got := timeouts(ctx, db); got != [2]int{1234, 56} {
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
