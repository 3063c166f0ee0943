// Package runtimetest holds test helpers for gooutbox: [MemoryStore], an
// in-memory [relay.Store] for unit tests and examples that need no database.
//
// Nothing here is meant for production: MemoryStore keeps every message in
// memory forever and loses them all when the process exits.
package runtimetest
