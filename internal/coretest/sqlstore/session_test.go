package sqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/gooutbox/outbox/internal/testhooks"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// lockDialects are the databases with a session lock.
var lockDialects = []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL}

// viaProxy opens one fresh, migrated database of dialect d twice: directly,
// and through a proxy (for faults). Both close when t ends.
func viaProxy(t *testing.T, d sqlstore.Dialect) (direct, proxied *sql.DB, p *runtimetest.Proxy) {
	t.Helper()
	var driver, dsn, pdsn string
	switch d {
	case sqlstore.MySQL:
		driver, dsn = "mysql", runtimetest.MySQLDSN(t)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		p = runtimetest.StartProxy(t, cfg.Addr)
		cfg.Addr = p.Addr()
		pdsn = cfg.FormatDSN()
	default:
		driver, dsn = "pgx", runtimetest.PostgresDSN(t)
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		p = runtimetest.StartProxy(t, u.Host)
		u.Host = p.Addr()
		pdsn = u.String()
	}
	var err error
	if direct, err = sql.Open(driver, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	if proxied, err = sql.Open(driver, pdsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	if err := sqlstore.Migrate(context.Background(), databasesql.New(direct), sqlstore.Schema{Dialect: d, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	return direct, proxied, p
}

// claimUntil claims as owner on s every 20 ms (a relay's poll) until a
// claim returns messages, and returns when that was; it fails t after
// limit.
func claimUntil(t *testing.T, s *sqlstore.Store, owner string, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		b, err := s.Claim(context.Background(), relay.ClaimRequest{Owner: owner, Limit: 10})
		var my *mysql.MySQLError
		if err != nil && !(errors.As(err, &my) && my.Number == 1205) {
			t.Fatalf("Claim(%s): %v", owner, err)
		}
		if len(b.Messages) > 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s claimed nothing within %v", owner, limit)
		}
		time.Sleep(20 * time.Millisecond) // a relay's poll
	}
}

// TestDeadRelayIsTakenOverInASecond: on PostgreSQL and MySQL/MariaDB a
// relay holds a session lock while it runs, so a standby takes the shards
// of one whose process died (its database connections closed, no Release)
// within about a second (a look, 250 ms, the 750 ms grace) plus a poll,
// not once its 15 s leases expire. A relay that is merely paused keeps
// its session: it is taken over only once its lease has expired.
func TestDeadRelayIsTakenOverInASecond(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d)+"/crash", func(t *testing.T) {
			t.Parallel()
			direct, proxied, p := viaProxy(t, d)
			ctx := context.Background()
			dead := mustStore(t, proxied, sqlstore.StoreConfig{}) // LeaseTTL 15s
			if _, err := dead.Claim(ctx, relay.ClaimRequest{Owner: "dead", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			standby := mustStore(t, direct, sqlstore.StoreConfig{})
			t.Cleanup(func() { standby.Close() })
			if b, err := standby.Claim(ctx, relay.ClaimRequest{Owner: "standby", Limit: 10}); err != nil || len(b.Messages) != 0 {
				t.Fatalf("standby's first Claim = %d messages, %v; want none", len(b.Messages), err)
			}
			writeEvents(t, direct, d, "1", "2", "3")
			// The process dies: the kernel closes its connections.
			died := time.Now()
			p.Refuse()
			took := claimUntil(t, standby, "standby", 10*time.Second).Sub(died)
			t.Logf("%s: dead relay taken over %v after its connections closed (LeaseTTL 15s)", d, took.Round(time.Millisecond))
			if took > 3*time.Second {
				t.Errorf("dead relay taken over after %v; want about 1s plus a poll (at most 3s here)", took)
			}
		})
		t.Run(string(d)+"/restart", func(t *testing.T) {
			// The only relay dies; its replacement starts afterwards (a
			// restart), so it never saw the lock held: the relays table
			// says the dead one held it.
			t.Parallel()
			direct, proxied, p := viaProxy(t, d)
			ctx := context.Background()
			dead := mustStore(t, proxied, sqlstore.StoreConfig{}) // LeaseTTL 15s
			if _, err := dead.Claim(ctx, relay.ClaimRequest{Owner: "dead", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			writeEvents(t, direct, d, "1", "2", "3")
			died := time.Now()
			p.Refuse()
			restarted := mustStore(t, direct, sqlstore.StoreConfig{})
			t.Cleanup(func() { restarted.Close() })
			took := claimUntil(t, restarted, "restarted", 10*time.Second).Sub(died)
			t.Logf("%s: dead relay's shards taken by a relay started after it died, %v after (LeaseTTL 15s)", d, took.Round(time.Millisecond))
			if took > 3*time.Second {
				t.Errorf("restarted relay claimed %v after the dead one died; want about 1s plus a poll (at most 3s here)", took)
			}
		})
		t.Run(string(d)+"/lockless", func(t *testing.T) {
			// A relay that holds no lock (LeaseExpiryOnly, an earlier
			// version) and stopped renewing is taken over only when its
			// lease expires, by a relay that never saw it: its lock being
			// free says nothing.
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			const ttl = 3 * time.Second
			lockless := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl, LeaseExpiryOnly: true})
			t.Cleanup(func() { lockless.Close() })
			renewed := time.Now()
			if _, err := lockless.Claim(ctx, relay.ClaimRequest{Owner: "lockless", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			writeEvents(t, db, d, "1", "2", "3")
			other := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
			t.Cleanup(func() { other.Close() })
			took := claimUntil(t, other, "other", 5*ttl).Sub(renewed)
			if took < ttl-100*time.Millisecond {
				t.Errorf("a relay without a lock taken over %v after its last renewal, before its lease (%v) expired", took, ttl)
			}
		})
		t.Run(string(d)+"/paused", func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			const ttl = 3 * time.Second
			paused := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
			t.Cleanup(func() { paused.Close() })
			renewed := time.Now()
			if _, err := paused.Claim(ctx, relay.ClaimRequest{Owner: "paused", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			standby := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
			t.Cleanup(func() { standby.Close() })
			writeEvents(t, db, d, "1", "2", "3")
			// The paused relay claims no more, and renews nothing; its
			// session, and its lock, live on.
			took := claimUntil(t, standby, "standby", 5*ttl).Sub(renewed)
			t.Logf("%s: paused relay taken over %v after its last renewal (LeaseTTL %v)", d, took.Round(time.Millisecond), ttl)
			if took < ttl-100*time.Millisecond {
				t.Errorf("paused relay taken over %v after its last renewal, before its lease (%v) expired", took, ttl)
			}
		})
	}
}

// TestEndedSessionFencesTheRelay: when the database session holding a
// relay's lock ends while the relay lives (the server killed it), the
// relay's store closes Batch.Lost of the batches it claimed within its
// check (200 ms, plus a ping of at most 500 ms), before the 750 ms grace
// after which others take it over; LeaseLost says why; and the relay's
// next claim takes a lock again and goes on.
func TestEndedSessionFencesTheRelay(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db, s, b := claimedThree(t, d)
			select {
			case <-b.Lost:
				t.Fatal("Batch.Lost closed while the session lives")
			default:
			}
			killed := time.Now()
			killLockSession(t, db, d, "r")
			select {
			case <-b.Lost:
				t.Logf("%s: Batch.Lost closed %v after the session was killed", d, time.Since(killed).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatal("Batch.Lost still open 5s after the relay's lock session was killed")
			}
			if reason, _, ok := s.LeaseLost("r"); !ok || reason != sqlstore.LossSessionEnded {
				t.Errorf("LeaseLost = %q, %v; want %q", reason, ok, sqlstore.LossSessionEnded)
			}
			// Its rows are given back and taken again: none was marked.
			claimUntil(t, s, "r", 10*time.Second)
		})
	}
}

// TestLateLockCheckWaitsWithoutGivingUp: when no check of a relay's lock
// was answered lately (its process was paused, or the answers came late),
// the batches it claimed are lost and its claims return nothing, with a
// hint to claim again soon; once a check is answered its claims go on
// under the same lock and session (no loss reported, no shard given
// back), and the rows of the lost batch are claimed again.
func TestLateLockCheckWaitsWithoutGivingUp(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db, s, b := claimedThree(t, d)
			ctx := context.Background()
			holder := lockHolder(t, db, d, "r")
			answer := testhooks.Sqlstore.LateLock(s, "r")
			if answer == nil {
				t.Fatal("the store holds no session lock for r")
			}
			select {
			case <-b.Lost:
			default:
				t.Fatal("Batch.Lost still open though the lock's last answered check is over lockAliveFor old")
			}
			late, err := s.Claim(ctx, relay.ClaimRequest{Owner: "r", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(late.Messages) != 0 || late.ClaimAgainIn <= 0 {
				t.Errorf("a claim while the lock is late = %d messages, ClaimAgainIn %v; want none, and a hint to claim again soon", len(late.Messages), late.ClaimAgainIn)
			}
			answer()
			deadline := time.Now().Add(10 * time.Second)
			for {
				again, err := s.Claim(ctx, relay.ClaimRequest{Owner: "r", Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				if len(again.Messages) > 0 {
					if len(again.Messages) != 3 {
						t.Errorf("after the lock was answered again, a claim got %d messages; want the lost batch's 3", len(again.Messages))
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no claim returned the lost batch's messages within 10s of the lock's check being late")
				}
				time.Sleep(20 * time.Millisecond) // a relay's poll
			}
			if reason, _, ok := s.LeaseLost("r"); ok {
				t.Errorf("LeaseLost = %q: a late check lost the relay's shards", reason)
			}
			if now := lockHolder(t, db, d, "r"); now != holder {
				t.Errorf("the lock is held by session %d, was %d: a late check gave the lock up", now, holder)
			}
		})
	}
}

// lockHolder returns the id of the session that holds owner's lock.
func lockHolder(t *testing.T, db *sql.DB, d sqlstore.Dialect, owner string) int64 {
	t.Helper()
	ctx := context.Background()
	var id sql.NullInt64
	var err error
	switch d {
	case sqlstore.MySQL:
		err = db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(CONCAT('outbox:', MD5(CONCAT_WS(CHAR(0), DATABASE(), 'outbox_messages', ?))))`, owner).Scan(&id)
	default:
		err = db.QueryRowContext(ctx, `SELECT l.pid FROM pg_locks l
			CROSS JOIN (SELECT ('x' || substr(md5(concat_ws(chr(31), current_schema(), 'outbox_messages', $1::text)), 1, 16))::bit(64)::bigint AS k) u
			WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid = ((u.k >> 32) & 4294967295)::oid AND l.objid = (u.k & 4294967295)::oid`, owner).Scan(&id)
	}
	if err != nil || !id.Valid {
		t.Fatalf("the session holding %s's lock: %v, %v", owner, id, err)
	}
	return id.Int64
}

// claimedThree opens a store with its defaults on a fresh database of d,
// writes three events, and returns the batch in which relay "r" claimed
// them.
func claimedThree(t *testing.T, d sqlstore.Dialect) (*sql.DB, *sqlstore.Store, relay.Batch) {
	t.Helper()
	db := migrated(t, d)
	s := mustStore(t, db, sqlstore.StoreConfig{})
	t.Cleanup(func() { s.Close() })
	writeEvents(t, db, d, "1", "2", "3")
	b, err := s.Claim(context.Background(), relay.ClaimRequest{Owner: "r", Limit: 10})
	if err != nil || len(b.Messages) != 3 || b.Lost == nil {
		t.Fatalf("Claim = %d messages, Lost %v, %v; want 3, a channel", len(b.Messages), b.Lost, err)
	}
	return db, s, b
}

// killLockSession ends, from another session, the session holding owner's
// lock.
func killLockSession(t *testing.T, db *sql.DB, d sqlstore.Dialect, owner string) {
	t.Helper()
	id := lockHolder(t, db, d, owner)
	var err error
	switch d {
	case sqlstore.MySQL:
		_, err = db.ExecContext(context.Background(), "KILL CONNECTION ?", id)
	default:
		var ok bool
		if err = db.QueryRowContext(context.Background(), `SELECT pg_terminate_backend($1)`, id).Scan(&ok); err == nil && !ok {
			err = errors.New("pg_terminate_backend: no such backend")
		}
	}
	if err != nil {
		t.Fatalf("kill session %d, which holds %s's lock: %v", id, owner, err)
	}
}

// TestHalfOpenConnectionsCostOneStoreTimeout: when every connection of a
// relay's pool turns half-open at once (a NAT entry gone), the claim on
// one of them times out after the relay's StoreTimeout, and the relay
// claims again within StoreTimeout plus 2 s: the timed-out connection is
// discarded, the idle ones are pinged with a deadline of their own (not
// the claim's) and dropped, and the lock's connection, cut off too, is
// replaced (its session, which the server still holds, ended). Before,
// each idle frozen connection cost another StoreTimeout.
func TestHalfOpenConnectionsCostOneStoreTimeout(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			direct, proxied, p := viaProxy(t, d)
			proxied.SetMaxIdleConns(8)
			ctx := context.Background()
			s := mustStore(t, proxied, sqlstore.StoreConfig{})
			t.Cleanup(func() { s.Close() })
			if _, err := s.Claim(ctx, relay.ClaimRequest{Owner: "r", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			// Four idle connections in the pool, as a busy relay leaves.
			var conns []*sql.Conn
			for range 4 {
				c, err := proxied.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.PingContext(ctx); err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			for _, c := range conns {
				c.Close()
			}
			time.Sleep(1100 * time.Millisecond) // idle long enough to be checked (pgx's and the store's 1s)
			writeEvents(t, direct, d, "1", "2", "3")
			const storeTimeout = 2 * time.Second // the relay's StoreTimeout
			froze := time.Now()
			if n := p.Blackhole(); n < 5 {
				t.Fatalf("blackholed %d connections, want the lock's and 4 more", n)
			}
			deadline := froze.Add(30 * time.Second)
			for {
				cctx, cancel := context.WithTimeout(ctx, storeTimeout)
				b, err := s.Claim(cctx, relay.ClaimRequest{Owner: "r", Limit: 10})
				cancel()
				if err == nil && len(b.Messages) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no claim returned messages within 30s of the connections freezing; last: %v", err)
				}
				time.Sleep(100 * time.Millisecond) // the relay's backoff
			}
			took := time.Since(froze)
			t.Logf("%s: claims again %v after every connection froze (StoreTimeout %v)", d, took.Round(time.Millisecond), storeTimeout)
			if took > storeTimeout+2*time.Second {
				t.Errorf("resumed %v after the connections froze; want within StoreTimeout + 2s (%v)", took, storeTimeout+2*time.Second)
			}
		})
	}
}

// TestStandbyTakesOverWithoutTheWakeRegister: the wake-up register
// (<table>_wake, PostgreSQL) only saves polls. With it dropped, the
// releasing relay's Release still releases its leases (it failed at the
// wake-up cancel before), and a standby that asked to be woken still takes
// the shards over (its renewal's extension of the request failed and rolled
// the lease transaction back, every time).
func TestStandbyTakesOverWithoutTheWakeRegister(t *testing.T) {
	t.Parallel()
	db := migrated(t, sqlstore.Postgres)
	ctx := context.Background()
	active := mustStore(t, db, sqlstore.StoreConfig{})
	standby := mustStore(t, db, sqlstore.StoreConfig{})
	t.Cleanup(func() { standby.Close() })
	if _, err := active.Claim(ctx, relay.ClaimRequest{Owner: "active", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := active.RequestWake(ctx, "active"); err != nil {
		t.Fatal(err)
	}
	if b, err := standby.Claim(ctx, relay.ClaimRequest{Owner: "standby", Limit: 10}); err != nil || len(b.Messages) != 0 {
		t.Fatalf("standby's Claim = %d messages, %v; want none", len(b.Messages), err)
	}
	if err := standby.RequestWake(ctx, "standby"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DROP SEQUENCE outbox_messages_wake`); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, db, sqlstore.Postgres, "1", "2", "3")
	if err := active.Release(ctx, "active"); err != nil {
		t.Errorf("Release without the wake register: %v", err)
	}
	claimUntil(t, standby, "standby", 10*time.Second)
}

// TestLeaseLostSaysWhy: a relay paused past its lease finds, at its next
// renewal, that another took its shards over: LeaseLost reports that the
// lease expired and how late the renewal came, once, and the batch it had
// claimed reports itself lost (Batch.Lost). A relay that gives shards back
// (a hand-over) has lost nothing.
func TestLeaseLostSaysWhy(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			const ttl = time.Second
			paused := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
			other := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl})
			t.Cleanup(func() { paused.Close(); other.Close() })
			writeEvents(t, db, d, "1", "2", "3")
			b, err := paused.Claim(ctx, relay.ClaimRequest{Owner: "paused", Limit: 10})
			if err != nil || len(b.Messages) != 3 {
				t.Fatalf("Claim = %d messages, %v; want 3", len(b.Messages), err)
			}
			// Paused: it claims nothing while the other takes over.
			claimUntil(t, other, "other", 10*ttl)
			if _, err := paused.Claim(ctx, relay.ClaimRequest{Owner: "paused", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			reason, late, ok := paused.LeaseLost("paused")
			if !ok || reason != sqlstore.LossExpired || late <= 0 {
				t.Errorf("LeaseLost(paused) = %q, %v, %v; want %q, a positive lateness", reason, late, ok, sqlstore.LossExpired)
			}
			if _, _, ok := paused.LeaseLost("paused"); ok {
				t.Error("LeaseLost reported the same loss twice")
			}
			select {
			case <-b.Lost:
			default:
				t.Error("the paused relay's batch does not report itself lost")
			}
			if _, err := other.HandOver(ctx, "other"); err != nil {
				t.Fatal(err)
			}
			if reason, _, ok := other.LeaseLost("other"); ok {
				t.Errorf("LeaseLost after a hand-over = %q; want none", reason)
			}
		})
	}
}

// TestSmallPoolTakesNoSessionLock: a store whose pool allows one
// connection (SetMaxOpenConns(1)) takes no session lock, which would hold
// that connection for good and leave its claims waiting for StoreTimeout:
// it claims and marks as a store with LeaseExpiryOnly does.
func TestSmallPoolTakesNoSessionLock(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			db.SetMaxOpenConns(1)
			s := mustStore(t, db, sqlstore.StoreConfig{})
			t.Cleanup(func() { s.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := 0; i < 3; i++ { // a renewal, a claim and a mark each time
				writeEvents(t, db, d, "1", "2")
				b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "small", Limit: 10})
				if err != nil {
					t.Fatalf("Claim %d on a pool of one connection: %v", i, err)
				}
				if len(b.Messages) == 0 {
					continue
				}
				if err := s.Mark(ctx, b, relay.Outcome{Published: ids(b)}); err != nil {
					t.Fatalf("Mark %d: %v", i, err)
				}
			}
			if inUse := db.Stats().InUse; inUse != 0 {
				t.Errorf("%d connections held between batches, want 0 (no session lock)", inUse)
			}
		})
	}
}

// TestReleasedOwnerRunsAgainAtOnce: a relay that releases its leases (it
// stopped) and runs again at once under the same owner, in the same
// process, takes its session lock again. The release gives the lock back
// with a statement: closing the connection frees the lock only once the
// server has ended the session, after the client has gone, which a busy
// server may take a while to do. The proxy here drops the driver's goodbye
// (PostgreSQL's Terminate, MySQL's COM_QUIT, at the end of what the
// driver sends last) and keeps the server's side
// open, so that the closed session holds on to everything it has not
// given back, for as long as the test runs.
func TestReleasedOwnerRunsAgainAtOnce(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			direct, db, p := viaProxy(t, d)
			goodbye := []byte{'X', 0, 0, 0, 4} // PostgreSQL's Terminate
			if d == sqlstore.MySQL {
				goodbye = []byte{1, 0, 0, 0, 1} // COM_QUIT
			}
			s := mustStore(t, db, sqlstore.StoreConfig{})
			t.Cleanup(func() { s.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 3 {
				writeEvents(t, direct, d, "1")
				b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "again", Limit: 10})
				if err != nil {
					t.Fatalf("run %d: Claim after the release: %v", i, err)
				}
				if len(b.Messages) != 1 {
					t.Fatalf("run %d: claimed %d messages, want 1", i, len(b.Messages))
				}
				if err := s.Mark(ctx, b, relay.Outcome{Published: ids(b)}); err != nil {
					t.Fatalf("run %d: Mark: %v", i, err)
				}
				dropped := p.BlackholeWhen(func(b []byte) bool { return bytes.HasSuffix(b, goodbye) })
				if err := s.Release(ctx, "again"); err != nil {
					t.Fatalf("run %d: Release: %v", i, err)
				}
				select {
				case <-dropped:
				case <-ctx.Done():
					t.Fatalf("run %d: the release closed no connection: its session lock's must be closed", i)
				}
			}
		})
	}
}

// TestMigrateAddsTheSessionLockColumn: a relays table of an earlier
// version, without session_lock, gets it from MigrateOutbox (run twice:
// idempotent), and a relay then registers and claims.
func TestMigrateAddsTheSessionLockColumn(t *testing.T) {
	t.Parallel()
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, `ALTER TABLE outbox_messages_relays DROP COLUMN session_lock`); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: d, Outbox: true}); err != nil {
					t.Fatalf("MigrateOutbox %d over an earlier relays table: %v", i+1, err)
				}
			}
			s := mustStore(t, db, sqlstore.StoreConfig{})
			t.Cleanup(func() { s.Close() })
			writeEvents(t, db, d, "1")
			claimUntil(t, s, "r", 10*time.Second)
		})
	}
}
