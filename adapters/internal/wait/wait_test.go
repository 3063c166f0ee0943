package wait_test

import (
	"context"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/internal/wait"
)

func TestSleep(t *testing.T) {
	if !wait.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep on a live context: false, want true")
	}
	if !wait.Sleep(context.Background(), 0) {
		t.Error("Sleep(0) on a live context: false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if wait.Sleep(ctx, time.Hour) {
		t.Error("Sleep on a cancelled context: true, want false")
	}
	if wait.Sleep(ctx, 0) {
		t.Error("Sleep(0) on a cancelled context: true, want false")
	}
}
