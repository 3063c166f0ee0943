package sqlstore

import "math"

// StallRenewals makes s call stall inside its lease transaction, after the
// leases are written and before the commit, as a relay paused there would.
func StallRenewals(s *Store, stall func()) { s.inRenew = stall }

// StaleWake makes w's view of the wake-up register say that no relay
// waits, and keeps w from reading the register again: w then writes as a
// writer that read it just before a relay asked for a wake-up.
func StaleWake(w *Writer) {
	w.wake.until.Store(0)
	w.wake.next.Store(math.MaxInt64)
}

// CountsBytesInDatabase reports whether s's claims add payload sizes up
// row by row (see selectClaimable).
func CountsBytesInDatabase(s *Store) bool { return s.largeRows.Load() }
