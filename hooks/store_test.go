package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
)

func placeOrders(t *testing.T, db *gorm.DB, n int) {
	t.Helper()
	orders := make([]Order, n)
	for i := range orders {
		orders[i].Place(float64(i))
	}
	if err := db.Create(&orders).Error; err != nil {
		t.Fatalf("Create: %v", err)
	}
}

func newStore(t *testing.T, db *gorm.DB) *hooks.Store {
	t.Helper()
	s, err := hooks.NewStore(db, hooks.StoreConfig{RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s
}

// claimUntil claims (publishing everything) until a claim returns want
// messages, and returns them.
func claimUntil(t *testing.T, s *hooks.Store, want int) []runtime.OutboxMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []runtime.OutboxMessage
		if _, err := s.Claim(context.Background(), 100, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			got = msgs
			return ids(msgs), nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) == want {
			return got
		}
		if len(got) != 0 || time.Now().After(deadline) {
			t.Fatalf("claim returned %v, want %d messages", ids(got), want)
		}
		time.Sleep(5 * time.Millisecond) // polling the store until a retry is due
	}
}

func ids(msgs []runtime.OutboxMessage) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func TestStoreClaimMarksAndRetries(t *testing.T) {
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		ctx := runtime.WithCorrelationID(context.Background(), "c-9")
		orders := make([]Order, 5)
		for i := range orders {
			orders[i].Place(float64(i))
		}
		if err := db.WithContext(ctx).Create(&orders).Error; err != nil {
			t.Fatal(err)
		}
		s := newStore(t, db)

		// First attempt: publish only the first two.
		var seen []runtime.OutboxMessage
		n, err := s.Claim(context.Background(), 3, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			seen = msgs
			return []int64{msgs[0].ID, msgs[1].ID}, errors.New("broker said no")
		})
		if n != 3 || err == nil {
			t.Fatalf("Claim = %d, %v; want 3 and the publish error", n, err)
		}
		m := seen[0]
		if m.EventType != "orders.order_placed" || m.EventVersion != 1 || m.AggregateType != "order" ||
			m.AggregateID != "1" || m.Topic != "order" || m.Headers[runtime.MetadataCorrelationID] != "c-9" ||
			m.OccurredAt.IsZero() || m.CreatedAt.IsZero() || len(m.Payload) == 0 {
			t.Errorf("claimed message = %+v", m)
		}
		// The failed one waits for its retry; the others go on.
		var again []runtime.OutboxMessage
		n, err = s.Claim(context.Background(), 10, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			again = msgs
			return ids(msgs), nil
		})
		if err != nil || n != 2 || again[0].ID != seen[2].ID+1 {
			t.Fatalf("Claim = %d (%v), %v; want the 2 rows after the failed one", n, ids(again), err)
		}
		// After the retry delay it is claimed again, with one attempt.
		again = claimUntil(t, s, 1)
		if again[0].ID != seen[2].ID || again[0].Attempts != 1 {
			t.Errorf("retry claim = %v (attempts %d), want %d with 1 attempt", ids(again), again[0].Attempts, seen[2].ID)
		}
		var lastErr string
		db.Raw(`SELECT last_error FROM outbox_messages WHERE id = ?`, seen[2].ID).Scan(&lastErr)
		if lastErr != "broker said no" {
			t.Errorf("last_error = %q", lastErr)
		}
		// Nothing left.
		n, err = s.Claim(context.Background(), 10, func(context.Context, []runtime.OutboxMessage) ([]int64, error) {
			t.Error("publish called with nothing pending")
			return nil, nil
		})
		if n != 0 || err != nil {
			t.Errorf("empty Claim = %d, %v", n, err)
		}
		// Cleanup deletes published rows older than the retention.
		if got, err := s.DeletePublished(context.Background(), time.Hour, 2); err != nil || got != 0 {
			t.Errorf("DeletePublished(1h) = %d, %v; want 0", got, err)
		}
		if got, err := s.DeletePublished(context.Background(), -time.Hour, 2); err != nil || got != 5 {
			t.Errorf("DeletePublished(-1h, batch 2) = %d, %v; want 5", got, err)
		}
	})
}

// postgresWithPlugin returns a fresh PostgreSQL schema with the outbox and
// orders tables and the plugin registered.
func postgresWithPlugin(t *testing.T) *gorm.DB {
	t.Helper()
	db := hookstest.Postgres(t, nil)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	p, err := hooks.New(hooks.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestStorePostgresClaimsAreExclusive(t *testing.T) {
	db := postgresWithPlugin(t)
	placeOrders(t, db, 6)
	s := newStore(t, db)

	holding := make(chan []int64)
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := s.Claim(context.Background(), 3, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			holding <- ids(msgs)
			<-release
			return ids(msgs), nil
		})
		done <- err
	}()
	first := <-holding
	var second []int64
	if _, err := s.Claim(context.Background(), 10, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
		second = ids(msgs)
		return second, nil
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("claims = %v and %v, want 3 rows each", first, second)
	}
	for _, a := range first {
		for _, b := range second {
			if a == b {
				t.Errorf("row %d claimed by both: %v, %v", a, first, second)
			}
		}
	}
}

func TestStoreListen(t *testing.T) {
	db := postgresWithPlugin(t)
	s := newStore(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	notes := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { notes <- struct{}{} }) }()
	deadline := time.After(10 * time.Second)
	select { // the initial call once listening
	case <-notes:
	case <-deadline:
		t.Fatal("no initial notify")
	}
	placeOrders(t, db, 2) // one transaction, one statement: one notification
	select {
	case <-notes:
	case err := <-done:
		t.Fatalf("Listen returned %v", err)
	case <-deadline:
		t.Fatal("no notification after a committed insert")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Listen after cancel = %v, want context.Canceled", err)
	}

	lite := newStore(t, hookstest.SQLite(t, nil))
	if err := lite.Listen(context.Background(), func() {}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SQLite Listen = %v, want errors.ErrUnsupported", err)
	}
}

// TestStoreRetryBlocksOnlyItsAggregateAndParks: a message that failed waits
// for its retry and holds back its aggregate only; past MaxAttempts it is
// parked, its aggregate goes on, and Unpark puts it back.
func TestStoreRetryBlocksOnlyItsAggregateAndParks(t *testing.T) {
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		enqueue := func(agg string) int64 {
			t.Helper()
			if _, err := p.Enqueue(db, "order", agg, OrderPaid{EventVersion: 2, OccurredAt: now(), Method: agg}); err != nil {
				t.Fatal(err)
			}
			var id int64
			db.Raw(`SELECT max(id) FROM outbox_messages`).Scan(&id)
			return id
		}
		aggOf := map[int64]string{}
		for _, agg := range []string{"a", "b", "a"} {
			aggOf[enqueue(agg)] = agg
		}
		// Publish everything but aggregate a, as the relay does when one of
		// a's messages is rejected.
		failA := func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			var ok []int64
			for _, m := range msgs {
				if m.AggregateID != "a" {
					ok = append(ok, m.ID)
				}
			}
			return ok, errors.New("message too large")
		}
		long, err := hooks.NewStore(db, hooks.StoreConfig{RetryDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := long.Claim(context.Background(), 10, failA); n != 3 || err == nil {
			t.Fatalf("Claim = %d, %v; want 3 and an error", n, err)
		}
		a3, b2 := enqueue("a"), enqueue("b")
		got := claimUntil(t, long, 1)
		if got[0].ID != b2 {
			t.Errorf("claim while a's messages wait = %v, want only %d (b); a3 = %d must wait behind them", ids(got), b2, a3)
		}

		// With MaxAttempts 2 and no delay, the failing message (a's first)
		// is parked on its second failure while b's are published; a's
		// later messages, which only waited behind it, are not.
		park, err := hooks.NewStore(db, hooks.StoreConfig{RetryDelay: time.Microsecond, MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		enqueue("b")
		db.Exec(`UPDATE outbox_messages SET next_attempt_at = NULL`)
		if n, err := park.Claim(context.Background(), 10, failA); n != 4 || err == nil {
			t.Fatalf("Claim = %d, %v; want a1, a2, a3 and b3", n, err)
		}
		var parkedIDs []int64
		db.Raw(`SELECT id FROM outbox_messages WHERE parked_at IS NOT NULL ORDER BY id`).Scan(&parkedIDs)
		if diff := cmp.Diff([]int64{1}, parkedIDs); diff != "" {
			t.Errorf("parked ids (-want +got):\n%s", diff)
		}
		// The parked message no longer holds its aggregate back.
		got = claimUntil(t, park, 2)
		if diff := cmp.Diff([]int64{3, a3}, ids(got)); diff != "" {
			t.Errorf("claim after parking (-want +got):\n%s", diff)
		}
		if n, err := park.Unpark(context.Background(), parkedIDs...); err != nil || n != 1 {
			t.Fatalf("Unpark = %d, %v", n, err)
		}
		got = claimUntil(t, park, 1)
		if diff := cmp.Diff(parkedIDs, ids(got)); diff != "" {
			t.Errorf("claim after Unpark (-want +got):\n%s", diff)
		}
	})
}

// TestStoreFailingAggregateDoesNotStarveOthers: an aggregate with more
// pending messages than a claim's limit, behind a message waiting for its
// retry, must not keep other aggregates' later messages from being claimed.
func TestStoreFailingAggregateDoesNotStarveOthers(t *testing.T) {
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		for i := range 11 {
			if _, err := p.Enqueue(db, "order", "1", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Enqueue(db, "order", "2", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "other"}); err != nil {
			t.Fatal(err)
		}
		s, err := hooks.NewStore(db, hooks.StoreConfig{RetryDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		// Order 1's first message fails; the rest of order 1 waits behind it.
		if _, err := s.Claim(context.Background(), 5, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			return nil, errors.New("rejected")
		}); err == nil {
			t.Fatal("Claim with a failing publish returned no error")
		}
		got := claimUntil(t, s, 1)
		if got[0].AggregateID != "2" {
			t.Errorf("claim = %+v, want order 2's message", got)
		}
	})
}

func TestStoreStats(t *testing.T) {
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		s := newStore(t, db)
		st, err := s.Stats(context.Background())
		if err != nil || st != (hooks.Stats{}) {
			t.Fatalf("Stats of an empty outbox = %+v, %v", st, err)
		}
		for _, agg := range []string{"a", "b", "c"} {
			if _, err := p.Enqueue(db, "order", agg, OrderPaid{EventVersion: 2, OccurredAt: now(), Method: agg}); err != nil {
				t.Fatal(err)
			}
		}
		// Make the oldest message an hour old, then fail b and park c.
		db.Exec(`UPDATE outbox_messages SET created_at = ? WHERE aggregate_id = 'a'`, time.Now().Add(-time.Hour).UTC())
		db.Exec(`UPDATE outbox_messages SET attempts = 2 WHERE aggregate_id = 'b'`)
		db.Exec(`UPDATE outbox_messages SET parked_at = ? WHERE aggregate_id = 'c'`, time.Now().UTC())
		st, err = s.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending != 2 || st.Retrying != 1 || st.Parked != 1 || st.OldestPending < 59*time.Minute || st.OldestPending > 2*time.Hour {
			t.Errorf("Stats = %+v, want 2 pending (1 retrying), 1 parked, oldest about 1h", st)
		}
	})
}
