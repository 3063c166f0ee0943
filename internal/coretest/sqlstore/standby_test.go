package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// leaseHolders returns how many unexpired shards each relay holds, read
// from the leases table.
func leaseHolders(t *testing.T, db *sql.DB, d sqlstore.Dialect) map[string]int {
	t.Helper()
	out, err := scanHolders(db.Query(`SELECT owner, count(*) FROM outbox_messages_leases
		WHERE owner IS NOT NULL AND expires_at > ` + leaseTime(d, 0) + ` GROUP BY owner`))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// standbyStore returns a store of cfg over an outbox of one event for
// each of n aggregates, and a claim of one message for an owner.
func standbyStore(t *testing.T, d sqlstore.Dialect, n int, cfg sqlstore.StoreConfig) (*sql.DB, *sqlstore.Store, func(owner string) relay.Batch) {
	t.Helper()
	db := migrated(t, d)
	aggs := make([]string, n)
	for i := range aggs {
		aggs[i] = fmt.Sprint("agg-", i)
	}
	if n > 0 {
		writeEvents(t, db, d, aggs...)
	}
	store := mustStore(t, db, cfg)
	return db, store, func(owner string) relay.Batch {
		t.Helper()
		b, err := store.Claim(context.Background(), relay.ClaimRequest{Owner: owner, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestStandbyRelaysTakeOverAReleasedLeader: with MaxActiveRelays 1, the
// first relay takes every shard and keeps them while two others start
// beside it; those claim nothing and say when to look again (their next
// renewal, within 250 ms). When the active relay releases its shards
// (it stopped cleanly), one standby takes all of them within a few of
// those looks, and the other keeps standing by.
func TestStandbyRelaysTakeOverAReleasedLeader(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db, store, claim := standbyStore(t, d, 200, sqlstore.StoreConfig{MaxActiveRelays: 1})
			if b := claim("a"); len(b.Messages) != 1 {
				t.Fatalf("first relay's claim: %d messages, want 1", len(b.Messages))
			}
			for range 3 {
				for _, standby := range []string{"b", "c"} {
					b := claim(standby)
					if len(b.Messages) != 0 {
						t.Fatalf("relay %s, standing by, claimed %d messages", standby, len(b.Messages))
					}
					if b.ClaimAgainIn <= 0 || b.ClaimAgainIn > 250*time.Millisecond {
						t.Fatalf("relay %s, standing by, says claim again in %v; want (0, 250ms]", standby, b.ClaimAgainIn)
					}
				}
				// The active relay sees two more relays alive and keeps
				// its shards.
				if b := claim("a"); len(b.Messages) != 1 {
					t.Fatalf("active relay's claim beside two standbys: %d messages, want 1", len(b.Messages))
				}
			}
			if got := leaseHolders(t, db, d); len(got) != 1 || got["a"] != sqlstore.Shards {
				t.Fatalf("leases held: %v; want all %d held by a", got, sqlstore.Shards)
			}
			// HeldShards (which the relay logs) agrees with the table.
			if a, b, x := store.HeldShards("a"), store.HeldShards("b"), store.HeldShards("nobody"); a != sqlstore.Shards || b != 0 || x != 0 {
				t.Fatalf("HeldShards a, b, unknown = %d, %d, %d; want %d, 0, 0", a, b, x, sqlstore.Shards)
			}

			if err := store.Release(context.Background(), "a"); err != nil {
				t.Fatal(err)
			}
			// Each standby claims when its hint says (its next look, within
			// 250 ms); the look finds the shards free and renews at once,
			// so two rounds suffice (without the look, the renewal would
			// wait for its schedule, a second).
			for round := 1; ; round++ {
				var wait time.Duration
				for _, standby := range []string{"b", "c"} {
					b := claim(standby)
					wait = max(wait, b.ClaimAgainIn)
				}
				got := leaseHolders(t, db, d)
				if len(got) == 1 && (got["b"] == sqlstore.Shards || got["c"] == sqlstore.Shards) {
					break
				}
				if round == 3 {
					t.Fatalf("leases held after %d rounds of the standbys' claims since the active relay released them: %v; want all %d held by b or c", round, got, sqlstore.Shards)
				}
				time.Sleep(max(wait, time.Millisecond)) // the wait the hints ask for
			}
		})
	}
}

// TestStandbyTakesOverADeadLeaderOnlyOnceItsLeasesExpire: a relay that
// dies keeps its leases until they expire; the standby beside it claims
// nothing before, and takes every shard after.
func TestStandbyTakesOverADeadLeaderOnlyOnceItsLeasesExpire(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ttl := 2 * time.Second
			db, _, claim := standbyStore(t, d, 200, sqlstore.StoreConfig{MaxActiveRelays: 1, LeaseTTL: ttl})
			start := time.Now()
			if b := claim("dead"); len(b.Messages) != 1 {
				t.Fatalf("first relay's claim: %d messages, want 1", len(b.Messages))
			}
			// "dead" claims no more: it renews nothing.
			for {
				b := claim("standby")
				if len(b.Messages) > 0 {
					if since := time.Since(start); since < ttl {
						t.Fatalf("standby claimed %v after the dead relay's lease of %v began", since, ttl)
					}
					break
				}
				if time.Since(start) > 3*ttl {
					t.Fatalf("standby claimed nothing %v after the dead relay's last renewal (lease %v)", 3*ttl, ttl)
				}
				time.Sleep(max(b.ClaimAgainIn, time.Millisecond)) // the wait the hint asks for
			}
			if got := leaseHolders(t, db, d); len(got) != 1 || got["standby"] != sqlstore.Shards {
				t.Fatalf("leases held after the takeover: %v; want all %d held by standby", got, sqlstore.Shards)
			}
		})
	}
}

// TestSplitLeasesEndHeldByMaxActiveRelays: relays that start at the same
// moment may each take some shards (their first renewals run side by
// side, and each skips the lease rows the other is taking). Seeded with
// four relays holding 16 shards each, the relays outranked by
// MaxActiveRelays others give theirs back, and the shards end evenly
// shared by that many relays: the ones whose names sort first, as all
// hold as many.
func TestSplitLeasesEndHeldByMaxActiveRelays(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		for _, active := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d", d, active), func(t *testing.T) {
				t.Parallel()
				db, _, claim := standbyStore(t, d, 200, sqlstore.StoreConfig{MaxActiveRelays: active})
				owners := []string{"r1", "r2", "r3", "r4"}
				for i, o := range owners {
					holdLeases(t, db, d, o, 16*i, 16*(i+1))
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					for _, o := range owners {
						claim(o)
					}
					got := leaseHolders(t, db, d)
					even := len(got) == active
					for _, o := range owners[:active] {
						even = even && got[o] == sqlstore.Shards/active
					}
					if even {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("leases held after 10s of claims: %v; want %v holding %d each", got, owners[:active], sqlstore.Shards/active)
					}
					time.Sleep(5 * time.Millisecond) // the next round of claims
				}
			})
		}
	}
}

// TestTheRelayHoldingTheMostShardsStaysActive: seeded with one relay
// holding 40 shards and three holding 8, the relay with 40 ends holding all
// 64 (a name sorting first does not outrank more shards).
func TestTheRelayHoldingTheMostShardsStaysActive(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db, _, claim := standbyStore(t, d, 200, sqlstore.StoreConfig{})
			holdLeases(t, db, d, "r4", 0, 40)
			for i, o := range []string{"r1", "r2", "r3"} {
				holdLeases(t, db, d, o, 40+8*i, 48+8*i)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				for _, o := range []string{"r1", "r2", "r3", "r4"} {
					claim(o)
				}
				got := leaseHolders(t, db, d)
				if len(got) == 1 && got["r4"] == sqlstore.Shards {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("leases held after 10s of claims: %v; want all %d held by r4, which held the most", got, sqlstore.Shards)
				}
				time.Sleep(5 * time.Millisecond) // the next round of claims
			}
		})
	}
}

// TestStandbyTakesTheShardsTheActiveRelaysLeave: a relay of an earlier
// version (or with another MaxActiveRelays) shares the shards with every
// relay alive, so beside a new one it holds half and leaves half free; the
// new relay, outranked, would stand by and leave that half unpublished
// until the old one stops. Shards that stay free for a second or more are
// ones the relays above leave: it takes and keeps them.
func TestStandbyTakesTheShardsTheActiveRelaysLeave(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db, _, claim := standbyStore(t, d, 200, sqlstore.StoreConfig{LeaseTTL: 2 * time.Second})
			holdLeases(t, db, d, "old", 0, 32) // it never lets them expire here
			deadline := time.Now().Add(10 * time.Second)
			claimed := 0
			for {
				b := claim("new")
				claimed += len(b.Messages)
				got := leaseHolders(t, db, d)
				if got["new"] == sqlstore.Shards/2 && got["old"] == sqlstore.Shards/2 && claimed > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("leases held after 10s of claims: %v, %d messages claimed; want old and new holding 32 each, and messages claimed", got, claimed)
				}
				time.Sleep(max(b.ClaimAgainIn, time.Millisecond)) // the wait the hint asks for
			}
			// It keeps them at its next renewals, outranked or not.
			for range 3 {
				time.Sleep(time.Second / 2)
				claim("new")
			}
			if got := leaseHolders(t, db, d); got["new"] != sqlstore.Shards/2 {
				t.Fatalf("leases held after more claims: %v; want new still holding 32", got)
			}
		})
	}
}

// holdLeases gives owner the shards [from, to) for a minute, as a relay
// would hold them.
func holdLeases(t *testing.T, db *sql.DB, d sqlstore.Dialect, owner string, from, to int) {
	t.Helper()
	q := fmt.Sprintf(`UPDATE outbox_messages_leases SET owner = '%s', expires_at = %s
		WHERE shard >= %d AND shard < %d`, owner, leaseTime(d, time.Minute), from, to)
	if d == sqlstore.Postgres {
		// Past the guard that gives shards only to relays registered as
		// knowing the queue: owner is not a relay.
		q = `ALTER TABLE outbox_messages_leases DISABLE TRIGGER outbox_messages_lease_guard;
		` + q + `;
		ALTER TABLE outbox_messages_leases ENABLE TRIGGER outbox_messages_lease_guard`
	}
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
}

// leaseTime is the SQL of the database's now plus after, as dialect d
// keeps lease expiries (SQLite: the process's clock, in microseconds).
func leaseTime(d sqlstore.Dialect, after time.Duration) string {
	switch d {
	case sqlstore.MySQL:
		return fmt.Sprintf("DATE_ADD(UTC_TIMESTAMP(6), INTERVAL %d MICROSECOND)", after.Microseconds())
	case sqlstore.SQLite:
		return fmt.Sprint(time.Now().Add(after).UnixMicro())
	}
	return fmt.Sprintf("now() + interval '%d microseconds'", after.Microseconds())
}

// TestStandbyAsksWritersForNoWakeUp: on PostgreSQL a waiting relay has
// writers notify it (the wake-up register, <table>_wake, holds the time
// until which one waits). A standby that asks leaves the register alone,
// as it has nothing to be woken for, and makes the request once it takes
// the shards over.
func TestStandbyAsksWritersForNoWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, store, claim := standbyStore(t, sqlstore.Postgres, 0, sqlstore.StoreConfig{MaxActiveRelays: 1})
	waitingUntil := func() time.Time {
		t.Helper()
		var ms int64
		if err := db.QueryRow(`SELECT last_value FROM outbox_messages_wake`).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return time.UnixMilli(ms)
	}
	claim("active")
	claim("standby")
	if err := store.RequestWake(ctx, "standby"); err != nil {
		t.Fatal(err)
	}
	if until := waitingUntil(); until.After(time.Now()) {
		t.Fatalf("after a standby's wake-up request the register says a relay waits until %v: writers would notify for nothing", until)
	}
	if err := store.Release(ctx, "active"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !waitingUntil().After(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the standby took over and waits, but the register says no relay waits: writers would not wake it")
		}
		b := claim("standby")
		time.Sleep(max(b.ClaimAgainIn, time.Millisecond)) // the wait the hint asks for
	}
}

// TestMaxActiveRelaysMustNotBeNegative: a negative limit is refused.
func TestMaxActiveRelaysMustNotBeNegative(t *testing.T) {
	t.Parallel()
	if err := (sqlstore.StoreConfig{MaxActiveRelays: -1}).Validate(); err == nil {
		t.Fatal("Validate accepted MaxActiveRelays -1")
	}
}

// TestStandbyLooksOftenAndRenewsOncePerSecond: a standby looks for shards
// nobody holds at each claim its hints ask for (every 250 ms), with one
// read, and runs its lease renewal, a durable transaction of half a dozen
// statements, only on the usual schedule (every second with the default
// lease): three standbys used to renew twelve times a second.
func TestStandbyLooksOftenAndRenewsOncePerSecond(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			_, store, claim := standbyStore(t, d, 10, sqlstore.StoreConfig{})
			claim("active")
			claim("standby")
			var renewals atomic.Int32
			stallRenewals(store, func() { renewals.Add(1) })
			claims := 0
			for start := time.Now(); time.Since(start) < 1500*time.Millisecond; claims++ {
				b := claim("standby")
				if len(b.Messages) != 0 {
					t.Fatal("the standby claimed messages")
				}
				if b.ClaimAgainIn <= 0 || b.ClaimAgainIn > 250*time.Millisecond {
					t.Fatalf("the standby says claim again in %v; want (0, 250ms]", b.ClaimAgainIn)
				}
				time.Sleep(b.ClaimAgainIn) // the wait the hint asks for
			}
			if n := renewals.Load(); n < 1 || n > 2 {
				t.Fatalf("the standby renewed %d times in 1.5 s of %d claims; want 1 or 2 (once a second)", n, claims)
			}
		})
	}
}

// TestStandbysJoiningCostTheActiveRelayNoRenewal: a claim carries the
// number of relays alive, and a change makes a sharing relay renew at its
// next claim, in line, to give shards back. Relays that join as standbys
// change no share: the active relay goes on claiming without a renewal
// (it used to run one in line, a durable transaction, for every relay that
// started beside it).
func TestStandbysJoiningCostTheActiveRelayNoRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			// A lease long enough that no renewal falls due by time
			// while the claims run, however slowly a loaded machine
			// runs them (CI saw one with the default 15s, every 3s).
			cfg := sqlstore.StoreConfig{LeaseTTL: 10 * time.Minute}
			db, active, claim := standbyStore(t, d, 200, cfg)
			claim("active") // its first renewal takes every shard
			// Three standbys in another process.
			others := mustStore(t, db, cfg)
			for _, o := range []string{"b", "c", "d"} {
				if b, err := others.Claim(ctx, relay.ClaimRequest{Owner: o, Limit: 1}); err != nil || len(b.Messages) != 0 {
					t.Fatalf("standby %s: claimed %d messages, %v; want none", o, len(b.Messages), err)
				}
			}
			// A renewal still falls due every second to rebalance: one
			// that runs after that schedule says nothing about the
			// standbys, so a loaded machine whose claims ran past it
			// tries again.
			var mu sync.Mutex
			var renewedAt []time.Time
			stallRenewals(active, func() {
				mu.Lock()
				defer mu.Unlock()
				renewedAt = append(renewedAt, time.Now())
			})
			for try := 1; ; try++ {
				due, running := nextRenewal(active, "active")
				for deadline := time.Now().Add(10 * time.Second); running; due, running = nextRenewal(active, "active") {
					if time.Now().After(deadline) {
						t.Fatal("a background renewal did not end within 10s")
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				renewedAt = nil
				mu.Unlock()
				for range 5 {
					if b := claim("active"); len(b.Messages) != 1 {
						t.Fatalf("active relay claimed %d messages, want 1", len(b.Messages))
					}
				}
				mu.Lock()
				at := slices.Clone(renewedAt)
				mu.Unlock()
				if len(at) == 0 {
					return
				}
				if at[0].Before(due) {
					t.Fatalf("the active relay renewed %d times in 5 claims after three standbys joined, the first %v before its schedule; want none", len(at), due.Sub(at[0]))
				}
				if try == 5 {
					t.Fatalf("in 5 tries, the claims ran past the renewal schedule (renewed %d times, on schedule); the machine is too slow to tell", len(at))
				}
				t.Logf("try %d: 5 claims ran past the renewal schedule; trying again", try)
			}
		})
	}
}

// TestStandbyRelayListensOnlyOnceActive: on PostgreSQL, a relay that stands
// by holds no LISTEN connection (it has nothing to be woken for; with
// several standbys that was one idle backend each, and a connection each
// opened at every start). Once the active relay stops and the standby takes
// its shards over, it listens, and a writer's notification alone (the
// relays poll once an hour) wakes it to publish.
func TestStandbyRelayListensOnlyOnceActive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := runtimetest.PostgresDSN(t)
	tag := fmt.Sprintf("%d", time.Now().UnixNano())
	open := func(app string) *sql.DB {
		db, err := sql.Open("pgx", dsn+"&application_name="+app)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	appA, appB := "active-"+tag, "standby-"+tag
	dbA, dbB := open(appA), open(appB)
	if err := sqlstore.Migrate(ctx, databasesql.New(dbA), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	listeners := func(app string) int {
		t.Helper()
		var n int
		if err := dbA.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pub := &countingPublisher{got: map[string]int{}}
	start := func(db *sql.DB) (stop func()) {
		t.Helper()
		r, err := relay.New(mustStore(t, db, sqlstore.StoreConfig{}), pub, relay.Config{PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		stop = sync.OnceFunc(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run() = %v", err)
			}
		})
		t.Cleanup(stop)
		select {
		case <-r.Running():
		case <-time.After(10 * time.Second):
			t.Fatal("relay did not start running")
		}
		return stop
	}
	stopA := start(dbA) // Running: it holds every shard and listens
	start(dbB)          // Running: its first claim found it standing by
	if n := listeners(appA); n != 1 {
		t.Fatalf("the active relay has %d LISTEN connections, want 1", n)
	}
	// The standby looks for free shards every 250 ms: give it a few looks.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n := listeners(appB); n != 0 {
			t.Fatalf("the standby has %d LISTEN connections, want none", n)
		}
	}
	if got := leaseHolders(t, dbA, sqlstore.Postgres); len(got) != 1 {
		t.Fatalf("leases held: %v; want every shard held by the active relay", got)
	}

	stopA() // releases its shards
	deadline := time.Now().Add(10 * time.Second)
	for listeners(appB) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the standby took no LISTEN connection within 10s of the active relay's stop (leases: %v)", leaseHolders(t, dbA, sqlstore.Postgres))
		}
		time.Sleep(10 * time.Millisecond)
	}
	writeEvents(t, dbA, sqlstore.Postgres, "after-takeover")
	for pub.published() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the relay that took over did not publish a new event within 10s: no notification woke it")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHandOverNeedsAnotherRelayAlive: HandOver (a relay cut off from its
// broker) keeps the shards while no other relay is alive, and otherwise
// gives them back: the standby takes all of them within a few of its
// looks, and the relay that handed over, claiming again, stands by.
func TestHandOverNeedsAnotherRelayAlive(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, store, claim := standbyStore(t, d, 200, sqlstore.StoreConfig{MaxActiveRelays: 1})
			if b := claim("a"); len(b.Messages) != 1 {
				t.Fatalf("first relay's claim: %d messages, want 1", len(b.Messages))
			}
			done, err := store.HandOver(ctx, "a")
			if err != nil || done {
				t.Fatalf("HandOver with no other relay alive = %v, %v; want false, nil", done, err)
			}
			if got := leaseHolders(t, db, d); len(got) != 1 || got["a"] != sqlstore.Shards {
				t.Fatalf("leases held after a refused hand-over: %v; want all %d held by a", got, sqlstore.Shards)
			}
			if b := claim("b"); len(b.Messages) != 0 {
				t.Fatalf("standby claimed %d messages", len(b.Messages))
			}
			if done, err := store.HandOver(ctx, "a"); err != nil || !done {
				t.Fatalf("HandOver beside a standby = %v, %v; want true, nil", done, err)
			}
			if got := store.HeldShards("a"); got != 0 {
				t.Fatalf("HeldShards(a) after the hand-over = %d, want 0", got)
			}
			for round := 1; ; round++ {
				b := claim("b")
				if got := leaseHolders(t, db, d); len(got) == 1 && got["b"] == sqlstore.Shards {
					break
				}
				if round == 5 {
					t.Fatalf("leases held after %d of the standby's claims since the hand-over: %v; want all %d held by b", round, leaseHolders(t, db, d), sqlstore.Shards)
				}
				time.Sleep(max(b.ClaimAgainIn, time.Millisecond)) // the wait the hint asks for
			}
			// The relay that handed over joins again as a standby.
			if b := claim("a"); len(b.Messages) != 0 || b.ClaimAgainIn <= 0 {
				t.Fatalf("relay a after its hand-over claimed %d messages (claim again in %v); want none, standing by", len(b.Messages), b.ClaimAgainIn)
			}
			if got := leaseHolders(t, db, d); len(got) != 1 || got["b"] != sqlstore.Shards {
				t.Fatalf("leases held once a is back: %v; want all %d held by b", got, sqlstore.Shards)
			}
		})
	}
}
