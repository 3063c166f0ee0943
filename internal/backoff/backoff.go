// Package backoff computes the delays between retries that the relay, the
// consumer, the in-memory store and the broker adapters share, and waits
// them out (Sleep). It is internal to the repository: the root module's
// packages and the nested adapter modules import it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential returns the delay before the n-th retry (1-based): base
// doubled n-1 times, capped at ceiling. A non-positive base returns base;
// n < 1 counts as 1. It never overflows: doubling stops at the ceiling.
func Exponential(base, ceiling time.Duration, n int) time.Duration {
	if base <= 0 {
		return base
	}
	ceiling = max(ceiling, base)
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// Jitter returns a random duration between half of d and d, so that
// clients retrying after the same failure spread out. d <= 1 is returned as
// it is.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits for d or until ctx is done, and reports whether d elapsed. A
// non-positive d returns at once, reporting whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
