package sqlstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// TestJoiningRelayGetsItsShareFromABusyOne: a relay that starts beside a
// busy one (it claims non-stop, holding every shard) gets its share at
// once, not at the busy relay's next scheduled renewal (every second with
// the default lease): the busy relay's next claim sees one more relay
// alive and gives shards back at the claim after, and the new relay,
// whose empty claims say when to claim again (Batch.ClaimAgainIn), takes
// them at its next renewal.
func TestJoiningRelayGetsItsShareFromABusyOne(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			// The default lease: renewals every second, so with the
			// old schedule the busy relay would give nothing back
			// within the claims below.
			_, claim := oneAtATime(t, d, 400)
			if b := claim("busy"); len(b.Messages) != 1 {
				t.Fatalf("busy relay's first claim: %d messages, want 1", len(b.Messages))
			}
			b := claim("new")
			if len(b.Messages) != 0 || b.ClaimAgainIn <= 0 || b.ClaimAgainIn > time.Second {
				t.Fatalf("new relay's first claim: %d messages, ClaimAgainIn %v; want none, and a hint within a second", len(b.Messages), b.ClaimAgainIn)
			}
			// The busy relay claims twice (without marking: its rows
			// stay pending, and claims are leases, not locks).
			claim("busy")
			claim("busy")
			deadline := time.Now().Add(10 * b.ClaimAgainIn)
			for {
				time.Sleep(b.ClaimAgainIn) // the wait the hint asks for
				got := claim("new")
				if len(got.Messages) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("new relay got no messages within %v after the busy relay's claims: the busy relay did not give shards back", 10*b.ClaimAgainIn)
				}
				if got.ClaimAgainIn > 0 {
					b = got
				}
			}
		})
	}
}

// TestShortRelayLooksForItsShareSoonThenLessOften: a relay short of its
// share renews again every 5 ms for its first 100 ms, since a busy relay
// gives shards back within a batch or two of seeing it alive (it used to
// wait 250 ms, a quarter of a second in which the busy relay drained half
// the shards alone: two relays drained 50,000 events slower than one);
// while no shard comes (their holder stopped, and its leases must expire
// first) it then backs off, doubling, to 250 ms; once it holds its share
// it renews on the usual schedule.
func TestShortRelayLooksForItsShareSoonThenLessOften(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			store, claim := oneAtATime(t, d, 200)
			claim("busy") // takes every shard
			ms := time.Millisecond
			var wants []time.Duration
			for range 21 { // the first look, then 20 more at the minimum
				wants = append(wants, 5*ms)
			}
			wants = append(wants, 10*ms, 20*ms, 40*ms, 80*ms, 160*ms, 250*ms, 250*ms)
			for _, want := range wants {
				b := claim("new")
				if len(b.Messages) != 0 {
					t.Fatalf("new relay got messages while the busy one held every shard")
				}
				if got := takeEvery(store, "new"); got != want {
					t.Fatalf("new relay, short of its share, renews again in %v; want %v", got, want)
				}
				if b.ClaimAgainIn <= 0 || b.ClaimAgainIn > want {
					t.Fatalf("new relay's empty claim says claim again in %v; want (0, %v]", b.ClaimAgainIn, want)
				}
				time.Sleep(b.ClaimAgainIn) // the wait the hint asks for
			}
			// The busy relay sees the new one and gives half back (nothing
			// is in flight), and the new relay takes it at its next claim.
			claim("busy")
			claim("busy")
			time.Sleep(takeEvery(store, "new"))
			if b := claim("new"); len(b.Messages) == 0 {
				t.Fatal("new relay got no messages after the busy relay gave shards back")
			}
			if got := takeEvery(store, "new"); got != 0 {
				t.Fatalf("new relay holding its share renews to take shards in %v; want the usual schedule (0)", got)
			}
		})
	}
}

// oneAtATime returns a store with the default lease, every relay taking a
// share (MaxActiveRelays: Shards), over an outbox of one event for each of
// n aggregates, and a claim of one message for an owner.
func oneAtATime(t *testing.T, d sqlstore.Dialect, n int) (*sqlstore.Store, func(owner string) relay.Batch) {
	t.Helper()
	_, store, claim := standbyStore(t, d, n, sqlstore.StoreConfig{MaxActiveRelays: sqlstore.Shards})
	return store, claim
}

// TestNoShardGivenBackUnderABatchInFlight: a relay claims ahead while it
// marks its last batch, and a mark is fenced by the lease. When a relay
// joins, the busy one gives back only shards that the batch in flight does
// not hold, leaves the rest out of its claims, and gives them back at a
// later claim: the batch in flight is then marked in full, so the joining
// relay never publishes its rows again (the regression: 2 of 400 events
// on the broker twice with 4 relays on MariaDB).
func TestNoShardGivenBackUnderABatchInFlight(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			aggs := make([]string, 300)
			for i := range aggs {
				aggs[i] = fmt.Sprint("agg-", i)
			}
			writeEvents(t, db, d, aggs...)
			ctx := context.Background()
			store := mustStore(t, db, sqlstore.StoreConfig{MaxActiveRelays: sqlstore.Shards})
			claim := func(owner string, inFlight []int64) relay.Batch {
				t.Helper()
				b, err := store.Claim(ctx, relay.ClaimRequest{Owner: owner, Limit: 100, InFlight: inFlight})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			held := func() map[int16]bool {
				t.Helper()
				rows, err := db.QueryContext(ctx, `SELECT shard FROM outbox_messages_leases WHERE owner = 'busy'`)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				out := map[int16]bool{}
				for rows.Next() {
					var s int16
					if err := rows.Scan(&s); err != nil {
						t.Fatal(err)
					}
					out[s] = true
				}
				return out
			}
			b1 := claim("busy", nil)
			claim("new", nil) // one more relay alive
			b2 := claim("busy", ids(b1))
			if err := store.Mark(ctx, b1, relay.Outcome{Published: ids(b1)}); err != nil {
				t.Fatal(err)
			}
			// The claim ahead of b2's mark: the busy relay gives shards
			// back now.
			b3 := claim("busy", ids(b2))
			h := held()
			if len(h) == sqlstore.Shards {
				t.Fatalf("the busy relay gave no shard back with a second relay alive")
			}
			for _, m := range b2.Messages {
				if sh := sqlstore.ShardOf(m.AggregateType, m.AggregateID); !h[sh] {
					t.Fatalf("shard %d given back while batch b2 with its message %d was in flight", sh, m.ID)
				}
			}
			if err := store.Mark(ctx, b2, relay.Outcome{Published: ids(b2)}); err != nil {
				t.Fatal(err)
			}
			var published int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_messages WHERE `+publishedRows(d)).Scan(&published); err != nil {
				t.Fatal(err)
			}
			if want := len(b1.Messages) + len(b2.Messages); published != want {
				t.Fatalf("%d rows marked published, want %d (b1 and b2 in full)", published, want)
			}
			// Claims go on, each ahead of the last one's mark, and the
			// busy relay comes down to its share.
			last := b3
			for range 10 {
				if len(held()) <= sqlstore.Shards/2 {
					return
				}
				if err := store.Mark(ctx, last, relay.Outcome{Published: ids(last)}); err != nil {
					t.Fatal(err)
				}
				last = claim("busy", ids(last))
			}
			t.Fatalf("the busy relay still holds %d shards after 10 claims, want %d", len(held()), sqlstore.Shards/2)
		})
	}
}

// TestEmptyClaimsDoNotRenew: a claim that finds nothing has no row to
// carry the number of relays alive, and must not take that as a change of
// relays: each such claim used to schedule a lease renewal (a transaction
// with a durable commit) for the next claim, so a relay polling an empty
// outbox every few milliseconds renewed at every other claim.
func TestEmptyClaimsDoNotRenew(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			// Renewals due every second (LeaseTTL/5, at most 1s).
			store := mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: time.Minute})
			ctx := context.Background()
			var renewals atomic.Int32
			stallRenewals(store, func() { renewals.Add(1) })
			start := time.Now()
			for i := range 50 {
				b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r", Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				if len(b.Messages) != 0 {
					t.Fatalf("claim %d: %d messages from an empty outbox", i, len(b.Messages))
				}
			}
			// The first claim's, and one on schedule per second the claims
			// took (more than one on a loaded machine), not one per claim.
			took := time.Since(start)
			if n, most := renewals.Load(), 2+int32(took/time.Second); n > most {
				t.Errorf("50 empty claims in %v renewed the lease %d times; want at most %d (the first claim's, one per second on schedule)", took, n, most)
			}
		})
	}
}
