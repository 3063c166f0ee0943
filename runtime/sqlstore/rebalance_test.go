package sqlstore_test

import (
	"context"
	"fmt"
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
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			db := migrated(t, d)
			aggs := make([]string, 400)
			for i := range aggs {
				aggs[i] = fmt.Sprint("agg-", i)
			}
			writeEvents(t, db, d, aggs...)
			ctx := context.Background()
			// The default lease: renewals every second, so with the
			// old schedule the busy relay would give nothing back
			// within the claims below.
			store := mustStore(t, db, sqlstore.StoreConfig{})
			claim := func(owner string) relay.Batch {
				t.Helper()
				b, err := store.Claim(ctx, relay.ClaimRequest{Owner: owner, Limit: 1})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
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
