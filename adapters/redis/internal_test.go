package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// redisError is a server error reply, as go-redis returns them.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func TestPermanent(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), true},
		{redisError("ERR string exceeds maximum allowed size (proto-max-bulk-len)"), true},
		{redisError("ERR Protocol error: invalid bulk length"), true},
		{fmt.Errorf("wrapped: %w", ErrMessageTooLarge), true},
		{fmt.Errorf("%w: reserved key", errMarshal), true},
		{redisError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{redisError("LOADING Redis is loading the dataset in memory"), false},
		{redisError("READONLY You can't write against a read only replica."), false},
		{context.DeadlineExceeded, false},
		{errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), false},
	}
	for _, tt := range tests {
		if got := permanent(fmt.Errorf("redis: publish: %w", tt.err)); got != tt.want {
			t.Errorf("permanent(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestKeySlot checks the slot computation against CLUSTER KEYSLOT of Redis
// 7.0 (run on a cluster-enabled server).
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739,
		"foo":                  12182,
		"orders.placed":        10575,
		"{orders}.placed":      105,
		"a}b":                  7866,
		"{}x":                  10595,
		"a{b":                  13340,
		"{{a}":                 10276,
		"outbox-test:x:orders": 6764,
		"42":                   8000,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestDedupKeySlot: a stream's deduplication keys are in its cluster slot,
// whatever braces its name holds, and different streams' keys differ.
func TestDedupKeySlot(t *testing.T) {
	const uuid = "0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b"
	seen := map[string]string{}
	for _, stream := range []string{
		"orders", "orders.placed", "{orders}.placed", "{orders}.cancelled", "a{b}c{d}",
		"a}b", "}", "{}x", "{}", "a{b", "{", "{{a}", "x}{y}", "}}{", "{orders}", "{orders}}",
	} {
		key := dedupKeyPrefix(stream) + uuid
		if got, want := keySlot(key), keySlot(stream); got != want {
			t.Errorf("dedup key %q of stream %q: slot %d, want the stream's %d", key, stream, got, want)
		}
		if other, ok := seen[key]; ok {
			t.Errorf("streams %q and %q share the dedup key %q", other, stream, key)
		}
		seen[key] = stream
	}
}

// TestSlotTag: every slot has a tag (slotTag terminates).
func TestSlotTag(t *testing.T) {
	found := make(map[int]bool, 16384)
	for i := 0; len(found) < 16384; i++ {
		if i > 200_000 {
			t.Fatalf("%d slots have no tag below 200,000", 16384-len(found))
		}
		found[int(crc16(fmt.Sprint(i))%16384)] = true
	}
}
