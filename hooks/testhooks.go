package hooks

import "github.com/gooutbox/outbox/internal/testhooks"

// init gives this package's tests, which live in module internal/coretest,
// the switches they need (see package testhooks).
func init() {
	testhooks.Hooks.SetOrderLocks = func(p any, on bool) {
		pl := p.(*Plugin)
		pl.noOrderLocks = !on
		pl.writers.Clear()
	}
}
