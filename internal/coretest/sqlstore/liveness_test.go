package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func mustStore(t *testing.T, db *sql.DB, cfg sqlstore.StoreConfig) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.NewStore(databasesql.New(db), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRelayStalledInLeaseTransactionIsTakenOver: a relay that stops in the
// middle of its lease transaction (SIGSTOPped, or hung) holds the lease rows'
// locks. On PostgreSQL the transaction carries idle_in_transaction and
// statement timeouts of LeaseTTL/2, on MySQL/MariaDB the session's
// wait_timeout and innodb_lock_wait_timeout (whole seconds), so the server
// ends it and another relay takes the shards over once the lease expires,
// instead of skipping or waiting on the locked rows for as long as the
// stalled connection lives.
func TestRelayStalledInLeaseTransactionIsTakenOver(t *testing.T) {
	t.Parallel()
	for _, d := range []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			testRelayStalledInLeaseTransaction(t, migrated(t, d), d)
		})
	}
}

func testRelayStalledInLeaseTransaction(t *testing.T, db *sql.DB, d sqlstore.Dialect) {
	const ttl = time.Second
	stalled := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
	ctx := context.Background()
	if _, err := stalled.Claim(ctx, relay.ClaimRequest{Owner: "stalled", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	entered := make(chan struct{})
	// Once released (the test's end), a renewal retried after the server
	// ended the stalled transaction comes back here: close entered once.
	var once sync.Once
	stallRenewals(stalled, func() {
		once.Do(func() { close(entered) })
		<-release
	})
	renewUntil(t, stalled, "stalled", entered)
	awaitTakeover(t, db, d, ttl, 10*ttl, "stalled in its lease transaction")
}

// renewUntil claims as owner on s in the background until entered is
// closed (by a StallRenewals hook: the owner's renewal fell due), and
// fails t when that takes more than 10 s.
func renewUntil(t *testing.T, s *sqlstore.Store, owner string, entered <-chan struct{}) {
	t.Helper()
	go func() {
		for {
			_, err := s.Claim(context.Background(), relay.ClaimRequest{Owner: owner, Limit: 1})
			select {
			case <-entered:
				return
			default:
			}
			if err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // until the renewal is due
		}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("relay %q never renewed", owner)
	}
}

// awaitTakeover writes events on db and claims them as another relay
// until it gets some (the stopped relay's shards were taken over), failing
// t after limit. A lock wait timeout (MySQL) is retried, as a relay does.
func awaitTakeover(t *testing.T, db *sql.DB, d sqlstore.Dialect, ttl, limit time.Duration, how string) {
	t.Helper()
	writeEvents(t, db, d, "1", "2", "3")
	other := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
	start := time.Now()
	for {
		b, err := other.Claim(context.Background(), relay.ClaimRequest{Owner: "other", Limit: 10})
		var my *mysql.MySQLError
		if err != nil && !(errors.As(err, &my) && my.Number == 1205) {
			t.Fatal(err)
		}
		if len(b.Messages) > 0 {
			t.Logf("taken over %v after the relay %s (LeaseTTL %v)", time.Since(start).Round(time.Millisecond), how, ttl)
			return
		}
		if time.Since(start) > limit {
			t.Fatalf("no shard taken over %v after a relay %s", limit, how)
		}
		time.Sleep(20 * time.Millisecond) // leases expire by time
	}
}

// TestRelayFrozenWithItsLeaseCommitOnTheWayIsTakenOver: on MySQL and
// MariaDB the lease transaction's guard is the session's wait_timeout, so
// it must still hold while the COMMIT is on the way. A relay whose
// connection turns half-open right then (the proxy drops the COMMIT) leaves
// the server a session inside the transaction, holding the lease rows;
// with the guard still set the server closes it after a second and another
// relay takes the shards over once the lease expires. (When the guard was
// restored before the commit, the session kept the lease rows for
// wait_timeout, 8 hours by default, and no other relay ever got them.)
func TestRelayFrozenWithItsLeaseCommitOnTheWayIsTakenOver(t *testing.T) {
	t.Parallel()
	dsn := runtimetest.MySQLDSN(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.MySQL, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := runtimetest.StartProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	// As the README asks of MySQL relays: a read deadline, since the
	// driver's Commit takes no context.
	cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 2*time.Second
	frozenDB, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { frozenDB.Close() })

	const ttl = time.Second
	frozen := mustStore(t, frozenDB, sqlstore.StoreConfig{LeaseTTL: ttl})
	if _, err := frozen.Claim(ctx, relay.ClaimRequest{Owner: "frozen", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	froze := make(chan struct{})
	var once sync.Once
	stallRenewals(frozen, func() { // right before the COMMIT
		once.Do(func() {
			proxy.Blackhole()
			close(froze)
		})
	})
	renewUntil(t, frozen, "frozen", froze)
	awaitTakeover(t, db, sqlstore.MySQL, ttl, 15*ttl, "froze with its lease COMMIT on the way")
}

// TestLeaseGuardRestoresMySQLSession: the lease transaction's short
// wait_timeout and innodb_lock_wait_timeout are the session's, on MySQL, so
// they are put back after the commit, on the same connection; the pooled
// connection keeps the server's values for whatever uses it next.
func TestLeaseGuardRestoresMySQLSession(t *testing.T) {
	t.Parallel()
	db := migrated(t, sqlstore.MySQL)
	db.SetMaxOpenConns(1) // the store's transactions and the checks share one session
	var wait, lock int64
	if err := db.QueryRow(`SELECT @@SESSION.wait_timeout, @@SESSION.innodb_lock_wait_timeout`).Scan(&wait, &lock); err != nil {
		t.Fatal(err)
	}
	// One connection: the session lock would hold it (LeaseExpiryOnly's doc).
	s := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: 2 * time.Second, LeaseExpiryOnly: true})
	if _, err := s.Claim(context.Background(), relay.ClaimRequest{Owner: "r", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	var wait2, lock2 int64
	if err := db.QueryRow(`SELECT @@SESSION.wait_timeout, @@SESSION.innodb_lock_wait_timeout`).Scan(&wait2, &lock2); err != nil {
		t.Fatal(err)
	}
	if wait2 != wait || lock2 != lock {
		t.Errorf("after a renewal the session has wait_timeout %d, innodb_lock_wait_timeout %d; before: %d, %d", wait2, lock2, wait, lock)
	}
}

// TestClaimsDoNotWaitForARenewal: a renewal's transaction commits durably,
// so it runs beside the claims while the lease has more than half of
// LeaseTTL left: with the renewal stalled inside its transaction, claims
// still return messages. Once less than half is left, a claim waits for the
// renewal rather than read with a lease that may be running out, and fails
// when its context ends first.
func TestClaimsDoNotWaitForARenewal(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			writeEvents(t, db, d, "1", "2", "3")
			// Renewals fall due every second; a claim renews in line once
			// less than half the lease (5 s) is left, which a loaded
			// machine's delays must not reach before the renewal stalls
			// (with 2 s, a run under a load average of 11 renewed in line
			// and stalled the claim itself).
			const ttl = 10 * time.Second
			s := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
			ctx := context.Background()
			claim := func(ctx context.Context) (relay.Batch, error) {
				return s.Claim(ctx, relay.ClaimRequest{Owner: "r", Limit: 10})
			}
			if b, err := claim(ctx); err != nil || len(b.Messages) != 3 {
				t.Fatalf("first claim: %d messages, %v; want 3", len(b.Messages), err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			stallRenewals(s, func() {
				once.Do(func() { close(entered) })
				<-release
			})
			t.Cleanup(func() { close(release) })

			// Claim until the renewal falls due and stalls; every claim,
			// that one included, returns.
			results := make(chan error, 1)
			go func() {
				for {
					b, err := claim(ctx)
					if err == nil && len(b.Messages) != 3 {
						err = fmt.Errorf("%d messages, want 3", len(b.Messages))
					}
					if err != nil {
						results <- err
						return
					}
					select {
					case <-entered:
						results <- nil
						return
					case <-time.After(20 * time.Millisecond): // until the renewal is due
					}
				}
			}()
			select {
			case err := <-results:
				if err != nil {
					t.Fatalf("claim before the renewal stalled: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no claim returned, or no renewal started, within 30s")
			}
			go func() {
				b, err := claim(ctx)
				if err == nil && len(b.Messages) != 3 {
					err = fmt.Errorf("%d messages, want 3", len(b.Messages))
				}
				results <- err
			}()
			select {
			case err := <-results:
				if err != nil {
					t.Fatalf("claim beside the stalled renewal: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a claim waited for the stalled renewal while the lease had more than half its time left")
			}

			// Once the lease runs short, claims wait for the renewal.
			deadline := time.Now().Add(30 * time.Second)
			for {
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := claim(cctx)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					break
				}
				if err != nil {
					t.Fatalf("claim as the lease runs short: %v", err)
				}
				if time.Now().After(deadline) {
					t.Fatal("claims kept reading without a renewal for 30s, beyond the lease")
				}
				time.Sleep(20 * time.Millisecond) // leases run short by time
			}
		})
	}
}
