// Package redis is a Watermill [message.Publisher] and [message.Subscriber]
// for Redis Streams, built on github.com/redis/go-redis/v9 and
// watermill-redisstream (whose wire format and subscriber it uses).
//
// It is a broker adapter of the outbox relay: the relay publishes outbox
// rows through a [Publisher], and consumers read them back with a
// [Subscriber]. A topic is a stream key.
//
// # Publishing
//
// [Publisher.Publish] sends one XADD per message, all in one pipeline (one
// round trip per call; watermill-redisstream's publisher makes one round
// trip per message and stops at the first error), in order, and returns nil
// only when Redis has replied to each with an entry id (or, deduplicating,
// with the answer that the message is already in the stream). Each XADD
// runs inside a Lua script that deduplicates by message UUID: see What
// Redis promises. Errors are per
// message ([runtime.PublishErrors]); WRONGTYPE (the key holds something
// other than a stream) and a message too large are [runtime.Permanent], so
// the outbox parks them; OOM (maxmemory reached) and connection errors are
// retried by the relay.
//
// Streams are not trimmed unless [PublisherConfig.MaxLen] or
// [PublisherConfig.MaxAge] says so, because trimming deletes entries that a
// slow group has not read: see [PublisherConfig] for the trade-off.
//
// # What Redis promises
//
// Order: one stream per topic holds entries in the order added, and one
// subscriber hands them out in that order, a nacked message again before
// the next. Several subscribers in one group share entries with no regard
// to aggregates, so run one subscriber per group where order matters (see
// [Subscriber] for what a crash does to order).
//
// Deduplication: by the publisher, within a window. Redis Streams append
// whatever XADD they receive, and a write can arrive twice: the relay
// republishes after an ambiguous failure, and a write held up in a stalled
// connection (a proxy that buffers, a partition that heals while TCP
// retransmits) reaches Redis after go-redis or the relay retried it on
// another connection, and after the aggregate's later events. So the
// publisher adds each message with a Lua script that sets a key for its
// UUID (SET NX PX, in the stream's cluster slot:
// "{<stream>}:outbox:dedup:<uuid>") and adds the entry only if the key was
// new: within [PublisherConfig.DedupWindow] (10 minutes by default) a second
// write of the message, stale or retried, adds nothing. A write later than
// that is a second entry with the same UUID, which consumers drop with the
// inbox (runtime/consumer). The keys cost about 140 bytes plus the stream
// name's length each, for the window: see [PublisherConfig.DedupWindow]. A
// negative DedupWindow turns deduplication off (plain XADD).
//
// Durability: an XADD is acknowledged once the entry is in the server's
// memory. Whether it survives a restart depends on the server's
// persistence: with appendonly yes and appendfsync always nothing
// acknowledged is lost, with everysec up to a second is, with RDB snapshots
// only (or nothing, as on the test server here) everything since the last
// snapshot is. The adapter cannot check or change that; configure the
// server.
//
// # Error classes
//
// [Publisher.Publish] classes each failure for the outbox store
// (sqlstore.StoreConfig.MaxAttempts): permanent ([runtime.PermanentError],
// parked at once) for WRONGTYPE and an empty topic; transient
// ([runtime.TransientError], retried without counting an attempt) for
// network errors and timeouts, a pool timeout, and replies that say the
// server cannot serve now: LOADING, BUSY, TRYAGAIN, CLUSTERDOWN,
// MASTERDOWN, READONLY (a former primary after a failover). Anything else
// counts toward MaxAttempts: an unknown failure that repeats is treated as
// the message's.
//
// # Broker URL
//
// Importing the package registers redis:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openRedis (go doc -u).
//
// The package is a module of its own (go get
// github.com/gooutbox/outbox/adapters/redis), so that a program that does
// not use it does not require its client.
package redis
