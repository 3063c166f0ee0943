package backoff

import (
	"context"
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	for _, c := range []struct {
		base, ceiling time.Duration
		n             int
		want          time.Duration
	}{
		{time.Second, 30 * time.Second, 0, time.Second},
		{time.Second, 30 * time.Second, 1, time.Second},
		{time.Second, 30 * time.Second, 3, 4 * time.Second},
		{time.Second, 30 * time.Second, 6, 30 * time.Second},
		{time.Second, 30 * time.Second, 1 << 30, 30 * time.Second},
		{time.Second, 0, 5, time.Second}, // a ceiling below base is base
		{0, time.Second, 5, 0},
	} {
		if got := Exponential(c.base, c.ceiling, c.n); got != c.want {
			t.Errorf("Exponential(%s, %s, %d) = %s, want %s", c.base, c.ceiling, c.n, got, c.want)
		}
	}
}

func TestJitter(t *testing.T) {
	for range 1000 {
		if d := Jitter(time.Second); d < time.Second/2 || d > time.Second {
			t.Fatalf("Jitter(1s) = %s, outside [500ms, 1s]", d)
		}
	}
	if Jitter(1) != 1 || Jitter(0) != 0 {
		t.Error("Jitter changed a duration of at most 1ns")
	}
}

func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), 0) {
		t.Error("Sleep(0) on a live context reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep on a done context reported true")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep(1ms) reported false")
	}
}
