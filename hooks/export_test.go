package hooks

// SetOrderLocks turns the per-aggregate commit-order locks of p's inserts on
// or off, for benchmarks that measure their cost.
func SetOrderLocks(p *Plugin, on bool) { p.noOrderLocks = !on }

// StallRenewals makes s call stall inside its lease transaction, after the
// leases are written and before the commit, as a relay paused there would.
func StallRenewals(s *Store, stall func()) { s.inRenew = stall }
