package runtimetest_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func TestMemoryStore(t *testing.T) {
	runtimetest.TestStore(t, func(*testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
		s := &runtimetest.MemoryStore{}
		return s, s.Add
	})
}

func TestMemoryStoreRejectsUnclaimedIDs(t *testing.T) {
	s := &runtimetest.MemoryStore{}
	s.Add(runtime.OutboxMessage{Topic: "a"}, runtime.OutboxMessage{Topic: "a"})
	n, err := s.Claim(context.Background(), 1, func(context.Context, []runtime.OutboxMessage) ([]int64, error) {
		return []int64{1, 2}, nil
	})
	if n != 1 || err == nil {
		t.Errorf("Claim() = %d, %v; want 1 and an error for id 2", n, err)
	}
	if diff := cmp.Diff([]int64{1, 2}, s.Pending()); diff != "" {
		t.Errorf("Pending() (-want +got):\n%s", diff)
	}
}

func TestMemoryStoreUnpublishedWithoutError(t *testing.T) {
	s := &runtimetest.MemoryStore{}
	s.Add(runtime.OutboxMessage{Topic: "a"}, runtime.OutboxMessage{Topic: "a"})
	n, err := s.Claim(context.Background(), 10, func(context.Context, []runtime.OutboxMessage) ([]int64, error) {
		return []int64{2}, nil
	})
	if n != 2 || err == nil {
		t.Errorf("Claim() = %d, %v; want 2 and an error", n, err)
	}
	if diff := cmp.Diff([]int64{2}, s.Published()); diff != "" {
		t.Errorf("Published() (-want +got):\n%s", diff)
	}
	if m := s.Messages()[0]; m.Attempts != 1 || m.LastError == "" || m.Published() {
		t.Errorf("message 1 = attempts %d, last error %q, published %v; want a recorded failed attempt", m.Attempts, m.LastError, m.Published())
	}
}
