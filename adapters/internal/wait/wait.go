// Package wait provides the context-aware sleep the adapters' retry loops
// share.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, and reports whether the whole of d
// passed. A d of zero or less returns at once, reporting whether ctx is
// still live.
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
