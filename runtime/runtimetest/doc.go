// Package runtimetest holds test helpers for gooutbox: [MemoryStore], an
// in-memory [relay.Store] for unit tests and examples that need no database,
// and [TestStore], the conformance suite every relay.Store must pass:
//
//	func TestStore(t *testing.T) {
//		runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
//			s := newEmptyStore(t)
//			return s, func(msgs ...runtime.OutboxMessage) []int64 { return insert(t, s, msgs) }
//		})
//	}
//
// Beyond [relay.Store], the suite checks the operator's side of a store
// when the store has it: [Parker], [Discarder], [StatsReader] and
// [Retainer], which sqlstore.Store and MemoryStore both implement.
//
// Nothing here is meant for production: MemoryStore keeps every message in
// memory until [MemoryStore.DeletePublished] or [MemoryStore.Discard]
// drops it, and loses them all when the process exits.
package runtimetest
