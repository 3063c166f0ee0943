package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// NewStoreFunc returns an empty store for one subtest of [TestStore], and a
// function that commits msgs to it as pending messages (ignoring their ID,
// CreatedAt and Attempts) and returns the IDs they got, in order. It reports
// its own failures with t.
type NewStoreFunc func(t *testing.T) (store relay.Store, add func(msgs ...runtime.OutboxMessage) []int64)

// TestStore is the conformance suite of [relay.Store]: every implementation
// must pass it. It runs subtests, each on a new store from newStore, that
// check the contract documented on [relay.Store.Claim]: claims in ID order up
// to the limit, exactly the returned IDs marked, failed attempts recorded,
// publish's error returned, nothing marked when ctx is cancelled, concurrent
// claims exclusive, and an aggregate skipped while another claim holds an
// earlier event of it (design invariant 4).
func TestStore(t *testing.T, newStore NewStoreFunc) {
	t.Run("Empty", func(t *testing.T) {
		store, _ := newStore(t)
		n, err := store.Claim(context.Background(), 10, func(context.Context, []runtime.OutboxMessage) ([]int64, error) {
			t.Error("publish called for an empty outbox")
			return nil, nil
		})
		if n != 0 || err != nil {
			t.Errorf("Claim() = %d, %v; want 0, nil", n, err)
		}
	})

	t.Run("OrderAndLimit", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(5, "a", "b")
		ids := add(msgs...)
		got := claimAll(t, store, 3, nil)
		if diff := cmp.Diff(msgs[:3], got, messageOpts...); diff != "" {
			t.Errorf("first claim (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(ids[:3], idsOf(got)); diff != "" {
			t.Errorf("first claim IDs (-want +got):\n%s", diff)
		}
		got = claimAll(t, store, 10, nil)
		if diff := cmp.Diff(ids[3:], idsOf(got)); diff != "" {
			t.Errorf("second claim IDs (-want +got):\n%s", diff)
		}
		if got := claimAll(t, store, 10, nil); len(got) != 0 {
			t.Errorf("third claim got IDs %v, want none: published messages are claimed again", idsOf(got))
		}
	})

	t.Run("PartialFailure", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(3, "a")...)
		errBroker := errors.New("broker unavailable")
		n, err := store.Claim(context.Background(), 10, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			return []int64{msgs[0].ID, msgs[2].ID}, errBroker
		})
		if n != 3 || !errors.Is(err, errBroker) {
			t.Errorf("Claim() = %d, %v; want 3 and an error wrapping publish's", n, err)
		}
		got := claimAll(t, store, 10, nil)
		if diff := cmp.Diff([]int64{ids[1]}, idsOf(got)); diff != "" {
			t.Fatalf("claim after partial failure (-want +got):\n%s", diff)
		}
		if got[0].Attempts != 1 {
			t.Errorf("Attempts = %d after one failed attempt, want 1", got[0].Attempts)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(2, "a")...)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := store.Claim(ctx, 10, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
			cancel()
			return idsOf(msgs), nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Claim() error = %v, want context.Canceled", err)
		}
		got := claimAll(t, store, 10, nil)
		if diff := cmp.Diff(ids, idsOf(got)); diff != "" {
			t.Errorf("claim after cancellation (-want +got):\n%s", diff)
		}
	})

	t.Run("Exclusive", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(4, "a")...)
		entered, release := make(chan []int64), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := store.Claim(context.Background(), 2, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
				entered <- idsOf(msgs)
				<-release
				return idsOf(msgs), nil
			})
			first <- err
		}()
		held := <-entered
		second := make(chan []runtime.OutboxMessage, 1)
		go func() { second <- claimAll(t, store, 10, nil) }()
		var got []runtime.OutboxMessage
		select {
		case got = <-second:
			close(release)
		case <-time.After(10 * time.Second):
			t.Error("a concurrent claim blocked on claimed messages instead of skipping them")
			close(release)
			got = <-second
		}
		if diff := cmp.Diff(ids[2:], idsOf(got)); diff != "" {
			t.Errorf("concurrent claim (-want +got):\n%s", diff)
		}
		if err := <-first; err != nil {
			t.Errorf("first Claim() = %v", err)
		}
		if diff := cmp.Diff(ids[:2], held); diff != "" {
			t.Errorf("first claim (-want +got):\n%s", diff)
		}
	})

	t.Run("AggregateOrder", func(t *testing.T) {
		store, add := newStore(t)
		msgs := testMessages(3, "a")
		msgs[1].AggregateID = msgs[0].AggregateID // messages 0 and 1: one aggregate
		ids := add(msgs...)
		entered, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := store.Claim(context.Background(), 1, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
				close(entered)
				<-release
				return idsOf(msgs), nil
			})
			first <- err
		}()
		<-entered
		got := claimAll(t, store, 10, nil)
		close(release)
		if err := <-first; err != nil {
			t.Errorf("first Claim() = %v", err)
		}
		if diff := cmp.Diff([]int64{ids[2]}, idsOf(got)); diff != "" {
			t.Errorf("claim while an earlier event of the aggregate is claimed (-want +got):\n%s", diff)
		}
		got = claimAll(t, store, 10, nil)
		if diff := cmp.Diff([]int64{ids[1]}, idsOf(got)); diff != "" {
			t.Errorf("claim after it was published (-want +got):\n%s", diff)
		}
	})

	t.Run("ConcurrentClaimsPublishOnce", func(t *testing.T) {
		store, add := newStore(t)
		ids := add(testMessages(100, "a", "b", "c")...)
		var (
			mu    sync.Mutex
			count = make(map[int64]int)
			wg    sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for range 1000 {
					got := claimAll(t, store, 7, nil)
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, m := range got {
						count[m.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		want := make(map[int64]int, len(ids))
		for _, id := range ids {
			want[id] = 1
		}
		if diff := cmp.Diff(want, count); diff != "" {
			t.Errorf("times each message was published (-want +got):\n%s", diff)
		}
	})
}

// messageOpts compares claimed messages with the messages added: the
// store-assigned fields are ignored and payloads compare as JSON values.
var messageOpts = cmp.Options{
	cmpopts.IgnoreFields(runtime.OutboxMessage{}, "ID", "CreatedAt", "Attempts"),
	cmpopts.EquateEmpty(),
	cmp.Transformer("JSON", func(raw json.RawMessage) any {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return string(raw)
		}
		return v
	}),
}

// claimAll claims up to limit messages, publishes all of them, and returns
// them; it fails t when Claim returns an error other than want.
func claimAll(t *testing.T, store relay.Store, limit int, want error) []runtime.OutboxMessage {
	t.Helper()
	var got []runtime.OutboxMessage
	n, err := store.Claim(context.Background(), limit, func(_ context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
		got = append(got, msgs...)
		return idsOf(msgs), nil
	})
	if !errors.Is(err, want) {
		t.Errorf("Claim() error = %v, want %v", err, want)
	}
	if n != len(got) {
		t.Errorf("Claim() = %d, but publish got %d messages", n, len(got))
	}
	return got
}

func idsOf(msgs []runtime.OutboxMessage) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// testMessages returns n messages of distinct aggregates, spread over topics.
func testMessages(n int, topics ...string) []runtime.OutboxMessage {
	msgs := make([]runtime.OutboxMessage, n)
	for i := range msgs {
		id := uuid.Must(uuid.NewV7())
		msgs[i] = runtime.OutboxMessage{
			Topic: topics[i%len(topics)],
			Envelope: runtime.Envelope{
				EventID:       id,
				EventType:     "runtimetest.thing_happened",
				EventVersion:  1,
				AggregateType: "thing",
				AggregateID:   id.String(),
				OccurredAt:    runtime.OccurredAt(time.Now()),
				Headers:       map[string]string{runtime.MetadataCorrelationID: fmt.Sprintf("corr-%d", i)},
				Payload:       fmt.Appendf(nil, `{"n":%d,"event_version":1}`, i),
			},
		}
	}
	return msgs
}
