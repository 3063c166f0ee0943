package sqlstore

// StallRenewals makes s call stall inside its lease transaction, after the
// leases are written and before the commit, as a relay paused there would.
func StallRenewals(s *Store, stall func()) { s.inRenew = stall }
