package hooks

// SetOrderLocks turns the per-aggregate commit-order locks of p's inserts on
// or off, for benchmarks that measure their cost.
func SetOrderLocks(p *Plugin, on bool) {
	p.noOrderLocks = !on
	p.writers.Clear()
}
