package hooks_test

import (
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/internal/testhooks"
)

// setOrderLocks turns the plugin's per-aggregate commit-order locks on or
// off (through package testhooks), to measure their cost.
func setOrderLocks(p *hooks.Plugin, on bool) { testhooks.Hooks.SetOrderLocks(p, on) }
