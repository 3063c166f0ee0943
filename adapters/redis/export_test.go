package redis

import "time"

// SetStaleAfter sets how long a consumer must be idle before a
// subscription deletes it, until the returned function restores it.
func SetStaleAfter(d time.Duration) (restore func()) {
	old := staleAfter
	staleAfter = d
	return func() { staleAfter = old }
}
