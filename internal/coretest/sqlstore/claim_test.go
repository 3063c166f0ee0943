package sqlstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestClaimKeepsTheByteCapWhateverThePayloads drains outboxes of mixed
// payload sizes with many limits and byte caps, and checks every batch
// against the cap's definition: the first claimable rows in id order, at
// most limit of them, each with less than MaxBytes of payload before it
// in the batch. Small payloads take the claim that reads sizes first,
// large ones the claim with a running sum, and the switches between them
// in both directions are on the way.
func TestClaimKeepsTheByteCapWhateverThePayloads(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			st, add := conformanceStore(t, d, databasesql.New(db), databasesql.Executor(db))
			store := st.(*sqlstore.Store)
			rng := rand.New(rand.NewPCG(1, uint64(len(d))))
			ctx := context.Background()
			for round := range 12 {
				limit := 1 + rng.IntN(12)
				maxBytes := int64(40 + rng.IntN(400))
				small := maxBytes / int64(limit)
				// Rounds alternate between outboxes of small payloads only
				// (the claim returns to reading sizes first) and mixed ones.
				mixed := round%2 == 1
				var sizes []int
				msgs := make([]runtime.OutboxMessage, 5+rng.IntN(30))
				for i := range msgs {
					size := 2 + rng.IntN(int(max(small-1, 1)))
					if mixed && rng.IntN(3) == 0 {
						size = int(small) + 1 + rng.IntN(int(maxBytes))
					}
					msgs[i] = sizedMessage(size)
					sizes = append(sizes, len(msgs[i].Payload))
				}
				ids := add(msgs...)
				size := make(map[int64]int, len(ids))
				for i, id := range ids {
					size[id] = sizes[i]
				}
				for len(ids) > 0 {
					var want []int64
					var before int64
					for _, id := range ids {
						if len(want) == limit || before >= maxBytes {
							break
						}
						want = append(want, id)
						before += int64(size[id])
					}
					b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "o", Limit: limit, MaxBytes: maxBytes})
					if err != nil {
						t.Fatal(err)
					}
					got := make([]int64, len(b.Messages))
					for i, m := range b.Messages {
						got[i] = m.ID
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("round %d (limit %d, max bytes %d, payload sizes %v): batch (-want +got):\n%s", round, limit, maxBytes, sizes, diff)
					}
					if err := store.Mark(ctx, b, relay.Outcome{Published: got}); err != nil {
						t.Fatal(err)
					}
					ids = ids[len(got):]
				}
				if !mixed && d == sqlstore.Postgres && countsBytesInDatabase(store) {
					t.Errorf("round %d: claims still add payload sizes up in the database after an outbox of small payloads", round)
				}
			}
		})
	}
}

// sizedMessage returns a message whose JSON payload is size bytes long
// (at least 2).
func sizedMessage(size int) runtime.OutboxMessage {
	id := uuid.Must(uuid.NewV7())
	payload := "{}"
	if size > 8 {
		payload = `{"p":"` + strings.Repeat("x", size-8) + `"}`
	}
	return runtime.OutboxMessage{
		Topic: "t",
		Envelope: runtime.Envelope{
			EventID: id, EventType: "sqlstore.sized", EventVersion: 1,
			AggregateType: "thing", AggregateID: fmt.Sprint(id),
			OccurredAt: runtime.OccurredAt(time.Now()), Payload: []byte(payload),
		},
	}
}
