package pgcdc_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

// TestParkedEventHoldsItsAggregate: an event the broker refuses for good
// is parked in its row (in Messages mode, a row the store writes); its
// aggregate's later events, streamed before and after, and after a
// restart of the store, wait behind it while other aggregates go on; once
// an operator retries it (sqlstore's Unpark, as outbox parked retry
// does), the aggregate's events are published in order, and later ones
// stream again.
func TestParkedEventHoldsItsAggregate(t *testing.T) {
	t.Parallel()
	forEachMode(t, testParkedEventHoldsItsAggregate)
}

func testParkedEventHoldsItsAggregate(t *testing.T, mode pgcdc.Mode) {
	ctx := context.Background()
	e := newEnv(t, mode)
	var refuse atomic.Bool
	refuse.Store(true)
	a1, poison, a3, b1 := event("a", 1), event("a", 2), event("a", 3), event("b", 1)
	pub := &broker{fn: func(msgs []*message.Message) error {
		if !refuse.Load() {
			return nil
		}
		errs := make(runtime.PublishErrors, len(msgs))
		failed := false
		for i, m := range msgs {
			if m.UUID == poison.EventID.String() {
				errs[i], failed = runtime.Permanent(errors.New("poison")), true
			} else if failed {
				errs[i] = errors.New("not sent after a failure")
			}
		}
		if failed {
			return errs
		}
		return nil
	}}
	store := e.open(t)
	stop := runRelay(t, store, pub)
	e.write(t, false, a1)
	e.write(t, false, poison)
	e.write(t, false, a3)
	e.write(t, false, b1)
	until(t, "the other aggregate published", func() bool { return slices.Contains(pub.ids(), b1.EventID.String()) })
	admin, err := sqlstore.NewStore(pgxv5.New(e.pool), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var parkedID int64
	until(t, "the poison event parked", func() bool {
		return e.pool.QueryRow(ctx, `SELECT id FROM outbox_messages WHERE parked_at IS NOT NULL AND event_id = $1`, poison.EventID).Scan(&parkedID) == nil
	})
	if diff := cmp.Diff([]string{a1.EventID.String(), b1.EventID.String()}, pub.ids()); diff != "" {
		t.Fatalf("published while the poison event is parked (-want +got):\n%s", diff)
	}

	// A restart keeps the aggregate held: a4, streamed after it, waits too.
	stop()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	a4, b2 := event("a", 4), event("b", 2)
	e.write(t, false, a4)
	e.write(t, false, b2)
	store = e.open(t)
	runRelay(t, store, pub)
	until(t, "b2 published", func() bool { return slices.Contains(pub.ids(), b2.EventID.String()) })
	for _, id := range pub.ids() {
		if id == a3.EventID.String() || id == a4.EventID.String() {
			t.Fatalf("event %s published while an earlier event of its aggregate is parked", id)
		}
	}

	// The operator retries it: the aggregate is published in order, and
	// streams again.
	refuse.Store(false)
	if n, err := admin.Unpark(ctx, parkedID); err != nil || n != 1 {
		t.Fatalf("Unpark = %d, %v", n, err)
	}
	until(t, "the held events published", func() bool { return slices.Contains(pub.ids(), a4.EventID.String()) })
	until(t, "the aggregate streaming again", func() bool {
		st, err := store.Stats(ctx)
		return err == nil && st.Parked == 0
	})
	a5 := event("a", 5)
	e.write(t, false, a5)
	until(t, "a5 published", func() bool { return slices.Contains(pub.ids(), a5.EventID.String()) })
	var held bool
	err = e.pool.QueryRow(ctx, `SELECT next_attempt_at IS NOT NULL OR last_error IS NOT NULL FROM outbox_messages WHERE event_id = $1`, a5.EventID).Scan(&held)
	switch {
	case mode == pgcdc.Messages && errors.Is(err, pgx.ErrNoRows):
		// No row: a5 streamed, as it should.
	case err != nil:
		t.Fatal(err)
	}
	if held {
		t.Error("a5, written after the aggregate's parked events were published, was held: the aggregate does not stream again")
	}
	var order []string
	for _, id := range pub.ids() {
		for _, ev := range []runtime.Envelope{a1, poison, a3, a4, a5} {
			if id == ev.EventID.String() {
				order = append(order, id)
			}
		}
	}
	want := []string{a1.EventID.String(), poison.EventID.String(), a3.EventID.String(), a4.EventID.String(), a5.EventID.String()}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Fatalf("aggregate a's events as published (-commit order +got):\n%s", diff)
	}
	var pending int
	until(t, "every row marked published", func() bool {
		return e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages WHERE published_at IS NULL`).Scan(&pending) == nil && pending == 0
	})
}

// TestStandbyLearnsOfParkedAggregate: a standby store opened before
// another store parked an aggregate learns of it when it takes the slot
// over: once the operator discards the parked event, it publishes the
// aggregate's held event from the table.
func TestStandbyLearnsOfParkedAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, pgcdc.Table)
	poison, later := event("p", 1), event("p", 2)
	pub := &broker{fn: func(msgs []*message.Message) error {
		errs := make(runtime.PublishErrors, len(msgs))
		failed := false
		for i, m := range msgs {
			if m.UUID == poison.EventID.String() {
				errs[i], failed = runtime.Permanent(errors.New("poison")), true
			} else if failed {
				errs[i] = errors.New("not sent after a failure")
			}
		}
		if failed {
			return errs
		}
		return nil
	}}
	active := e.open(t)
	stop := runRelay(t, active, pub)
	until(t, "the first store streaming", func() bool { return active.Confirmed() != 0 })
	standby := e.open(t)
	until(t, "the second store standing by", standby.Standby)
	runRelay(t, standby, pub)
	e.write(t, false, poison)
	e.write(t, false, later)
	until(t, "the later event held in its row", func() bool {
		var held bool
		return e.pool.QueryRow(ctx, `SELECT next_attempt_at = 'infinity' FROM outbox_messages WHERE event_id = $1`, later.EventID).Scan(&held) == nil && held
	})
	stop()
	if err := active.Close(); err != nil {
		t.Fatal(err)
	}
	until(t, "the standby streaming", func() bool { return !standby.Standby() })
	admin, err := sqlstore.NewStore(pgxv5.New(e.pool), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var parkedID int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM outbox_messages WHERE event_id = $1 AND parked_at IS NOT NULL`, poison.EventID).Scan(&parkedID); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Discard(ctx, parkedID); err != nil || n != 1 {
		t.Fatalf("Discard = %d, %v", n, err)
	}
	until(t, "the held event published by the store that took over", func() bool { return slices.Contains(pub.ids(), later.EventID.String()) })
}
