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
