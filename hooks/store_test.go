package hooks_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
	s, err := hooks.NewStore(db, hooks.StoreConfig{})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s
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
		// Next claim starts with the failed one, which now has one attempt.
		var again []runtime.OutboxMessage
		n, err = s.Claim(context.Background(), 10, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			again = msgs
			return ids(msgs), nil
		})
		if err != nil || n != 3 {
			t.Fatalf("Claim = %d, %v; want 3, nil", n, err)
		}
		if again[0].ID != seen[2].ID || again[0].Attempts != 1 || again[1].Attempts != 0 {
			t.Errorf("second claim = %v (attempts %d, %d), want it to start at %d with 1 attempt", ids(again), again[0].Attempts, again[1].Attempts, seen[2].ID)
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

func TestStorePostgresClaimsAreExclusive(t *testing.T) {
	db := hookstest.Postgres(t, nil)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	p, _ := hooks.New(hooks.Config{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
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
	db := hookstest.Postgres(t, nil)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	p, _ := hooks.New(hooks.Config{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
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
