package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
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
		driver, dsn = "mysql", hookstest.MySQLDSN(t)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		p = runtimetest.StartProxy(t, cfg.Addr)
		cfg.Addr = p.Addr()
		pdsn = cfg.FormatDSN()
	default:
		driver, dsn = "pgx", hookstest.PostgresDSN(t)
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
	if err := sqlstore.MigrateOutbox(context.Background(), direct, d, ""); err != nil {
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
	for _, d := range lockDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			s := mustStore(t, db, sqlstore.StoreConfig{})
			t.Cleanup(func() { s.Close() })
			writeEvents(t, db, d, "1", "2", "3")
			b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "r", Limit: 10})
			if err != nil || len(b.Messages) != 3 || b.Lost == nil {
				t.Fatalf("Claim = %d messages, Lost %v, %v; want 3, a channel", len(b.Messages), b.Lost, err)
			}
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

// killLockSession ends, from another session, the session holding owner's
// lock.
func killLockSession(t *testing.T, db *sql.DB, d sqlstore.Dialect, owner string) {
	t.Helper()
	ctx := context.Background()
	var n int64
	var err error
	switch d {
	case sqlstore.MySQL:
		var id sql.NullInt64
		err = db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(CONCAT('outbox:', MD5(CONCAT_WS(CHAR(0), DATABASE(), 'outbox_messages', ?))))`, owner).Scan(&id)
		if err == nil && id.Valid {
			_, err = db.ExecContext(ctx, "KILL CONNECTION ?", id.Int64)
			n = 1
		}
	default:
		err = db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
			CROSS JOIN (SELECT ('x' || substr(md5(concat_ws(chr(31), current_schema(), 'outbox_messages', $1::text)), 1, 16))::bit(64)::bigint AS k) u
			WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid = ((u.k >> 32) & 4294967295)::oid AND l.objid = (u.k & 4294967295)::oid`, owner).Scan(&n)
	}
	if err != nil || n != 1 {
		t.Fatalf("kill the session of %s's lock: %d killed, %v", owner, n, err)
	}
}
