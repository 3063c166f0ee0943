// Package sqlstore is the SQL storage layer of the outbox: the outbox table
// (and the lease tables relays share it through), the consumer's inbox
// table, the row format, and one implementation per database — PostgreSQL,
// MySQL 8 / MariaDB 10.6+, and SQLite — behind one internal interface, each
// in its own file (dialect_postgres.go, dialect_mysql.go, dialect_sqlite.go).
//
// Everything that writes or reads those tables goes through it: the GORM
// plugin (package hooks) writes outbox rows with a [Writer]; the relay
// (package runtime/relay) reads them through a [Store]; the consumer
// (package runtime/consumer) marks applied events with an [Inbox]. A relay
// that reads the rows from elsewhere (a change-data-capture stream) decodes
// them with [DecodeRow].
//
// It lives under runtime, beside the relay and the consumer that use it,
// because it needs no ORM: it works on database/sql (a DB, Tx,
// or any connection with ExecContext, QueryContext and QueryRowContext, as
// GORM's connection pools have), so a relay process opens a DB and
// nothing else, and a consumer that uses pgx or sqlc directly gets the same
// inbox. It does not import GORM, any SQLite driver or the MySQL driver (it
// knows go-sql-driver/mysql's errors by their type's name); it imports pgx
// (for LISTEN/NOTIFY).
//
// # Use
//
//	db, err := sql.Open("pgx", dsn)                              // or GORM's db.DB()
//	err = sqlstore.MigrateOutbox(ctx, db, sqlstore.Postgres, "") // or run OutboxDDL yourself
//	store, err := sqlstore.NewStore(db, sqlstore.StoreConfig{})  // the dialect comes from the driver
//	r, err := relay.New(store, publisher, relay.Config{})
//
// # Dialects
//
// A [Dialect] is named by GORM's dialector name or a driver name
// ([ParseDialect]), or read from a DB's driver ([DialectOf]: pgx's
// stdlib driver and lib/pq, go-sql-driver/mysql, and the glebarez, modernc
// and mattn SQLite drivers).
//
//   - PostgreSQL: the database's clock, partial indexes, INSERT ... ON
//     CONFLICT ... RETURNING, transaction-scoped advisory locks for commit
//     order, array parameters, and LISTEN/NOTIFY ([Store.Listen], through
//     pgx) so the relay is woken by every commit.
//   - MySQL 8 and MariaDB 10.6+ (InnoDB, through github.com/go-sql-driver/mysql
//     with parseTime=true and the default loc, UTC): no RETURNING and no ON
//     CONFLICT, so an insert is a plain multi-row INSERT, retried row by row
//     leaving out the duplicates when it hits an existing event id (error
//     1062); a row lock on a small lock table for commit order; leases taken
//     with SELECT ... FOR UPDATE SKIP LOCKED; no LISTEN (the relay polls).
//     See the comment of mysqlDialect for the details.
//   - SQLite: the process's clock where the schedule is compared, partial
//     indexes, INSERT ... ON CONFLICT ... RETURNING, and writers serialised
//     by the database, so ids follow commit order with no lock of ours; no
//     LISTEN.
//
// # Commit order
//
// The relay publishes an aggregate's events in outbox id order, so ids must
// follow commit order per aggregate, whatever the write path. Ids come from
// a sequence when a row is inserted, not when it commits, so two
// transactions writing events of one aggregate could commit in the other
// order. On PostgreSQL every [Writer.Write] therefore first takes a
// transaction-scoped advisory lock per aggregate (pg_advisory_xact_lock, in
// one sorted batch per statement): a second transaction writing events of
// the same aggregate waits at its insert until the first commits or rolls
// back. An aggregate saved through GORM is usually under its row lock
// already, which costs the lock nothing extra; a write that takes no row
// lock (the plugin's Enqueue) is what needs it. The events of a new
// aggregate, one the writing transaction inserted with a key the database
// generated ([Row.NewAggregate]), take no lock: no other transaction can
// know that aggregate before this one commits, so none can write its events
// in between. Most saves create aggregates, and the lock was the larger
// part of what the outbox cost them. Two transactions that write
// events of the same two aggregates in opposite orders can deadlock, as with
// row locks: PostgreSQL aborts one, and the application retries it. SQLite
// serialises writing transactions, so its ids follow commit order anyway.
//
// MySQL's named locks (GET_LOCK) belong to the session and outlive the
// commit, so on MySQL and MariaDB the lock is a row lock instead: before the
// outbox rows get their ids, the insert upserts the rows of its aggregates'
// slots in <table>_locks (INSERT ... ON DUPLICATE KEY UPDATE, in slot order;
// 65,536 slots by hash, so two aggregates rarely share one, and when they do
// they only wait for each other), and InnoDB holds those row locks until the
// transaction ends. A write outside a transaction runs in a transaction of
// its own for the same reason. A deadlock is reported as MySQL error 1213,
// and the application retries.
//
// # Several relays
//
// [Store] divides the outbox between relays by shard: each row carries one
// of [Shards] shards, computed from its aggregate ([ShardOf]), and the
// active relays hold leases on an even share of the shards. By default one
// relay is active and the others stand by to take its shards over
// ([StoreConfig.MaxActiveRelays]: sharing relays cost the database more per
// event, and pay only when the broker limits one relay). An aggregate is published by
// one relay at a time, and no transaction stays open while a relay
// publishes. A relay that stops cleanly hands its shards over at once; one
// that is paused or cut off loses them when its lease runs out
// ([StoreConfig.LeaseTTL], 15s by default) and can no longer mark their
// rows. On PostgreSQL and MySQL/MariaDB each relay also holds a session
// lock on a connection of its own (an advisory lock; GET_LOCK), so one
// whose process dies is taken over within about a second plus a poll,
// once the others have found its lock free twice 750ms apart; a relay
// whose session ended while it lives stops publishing before that
// ([relay.Batch.Lost], [Store.LeaseLost]). See StoreConfig.LeaseTTL and
// StoreConfig.LeaseExpiryOnly. The lease transaction is bounded on the server (PostgreSQL's
// transaction-local statement and idle-in-transaction timeouts; MySQL's
// session wait_timeout and innodb_lock_wait_timeout, restored before the
// commit), so a relay stalled inside it does not hold the lease rows.
//
// Renewals run in the background, beside the claims, while more than half
// of the lease is left; a claim renews in line when less is left, so a
// relay whose renewals fail stops claiming before its lease can run out.
// A relay gives a shard back only when the batch it has in flight (the
// claim ahead lists it) holds none of the shard's rows, and stops claiming
// the shards it must give back meanwhile: a mark is fenced by the lease, so
// a shard given back under a published batch would leave that batch's rows
// pending, for the next owner to publish again. Lease transactions that the
// database aborted to break a deadlock are run again.
//
// # Failed and poison messages
//
// A message the publisher did not take records its error (last_error) and
// waits before it is claimed again; its aggregate's later messages wait
// behind it, so the aggregate's order holds, and every other aggregate goes
// on. When nothing of the batch could be published (the broker is down for
// everyone), the wait is [StoreConfig.RetryDelay] and no attempt is
// counted, so an outage never parks anything and recovery takes seconds.
// When other messages were published (the failure is the message's own, or
// its partition's), an attempt is counted and the wait doubles per attempt
// up to [StoreConfig.MaxRetryDelay], on the database's clock.
//
// A message is parked — set aside for an operator, with parked_at and
// last_error — when the publisher says the broker will never take it (a
// [runtime.PermanentError], as adapters/kafka reports for a message too
// large), or after [StoreConfig.MaxAttempts] counted attempts when that is
// set. A parked message keeps holding its aggregate's later messages back:
// order is never given up silently. [Store.Unpark] puts it back in the
// queue (it is then published before the aggregate's later messages), and
// [Store.Discard] deletes it (the later messages then go out).
//
// # Schema
//
// [MigrateOutbox] (or [OutboxDDL], for users who run their own migrations)
// creates the table with a unique index on event_id and partial indexes on
// pending, blocked (waiting or parked) and parked rows; the two small tables
// relays share it through (<table>_leases, one row per shard, and
// <table>_relays); on PostgreSQL a sequence <table>_wake (the time until
// which a relay waits for a notification, read by writers at most every
// 100 ms: they send a NOTIFY on the table's channel, with no payload, only
// while a relay waits for one, see [Store.RequestWake]; a writer without
// the SELECT privilege on the sequence never notifies, and the relay then
// finds its rows at its next poll): a NOTIFY serializes the commits of the
// transactions that send it, so writers pay for a wake-up only when a relay
// is idle, never while it polls a busy table (earlier versions had a
// trigger read the register on every insert, 5 to 8 % of a busy writer's
// transaction; migrating drops it); on MySQL
// the commit-order lock table (<table>_locks). The statements are idempotent and bring a table of
// an earlier version up to date. Payloads and headers are TEXT: the exact
// JSON the event marshalled to, with no parse cost on insert (JSONB would
// also refuse a NUL character, which JSON allows as \u0000). Outbox table
// names are at most [MaxOutboxTableName] (49) bytes, so that the names
// derived from them fit in PostgreSQL's 63-byte identifiers ([CheckTable]).
//
// On MySQL and MariaDB the DSN needs parseTime=true, the default loc (UTC)
// and, for GORM's Save, clientFoundRows=true (see package hooks);
// interpolateParams=true saves a round trip per statement that has
// arguments. The tables are InnoDB, utf8mb4 with binary collation
// (aggregate ids compare as on PostgreSQL); aggregate_type, aggregate_id,
// event_type and topic are VARCHAR(255), payload LONGTEXT, times
// DATETIME(6) in UTC on the database's clock. With no partial indexes, the
// pending rows are the (NULL, NULL) prefix of an index on (published_at,
// parked_at, id), read in id order, and the rows that hold their aggregate
// back are found through a virtual column, blocked (1 on an unpublished row
// that failed or is parked, NULL otherwise), indexed with the aggregate.
//
// The inbox table ([InboxDDL], [MigrateInbox]) has one row per applied
// event and consumer, keyed (consumer, event_id), with an index on
// (consumer, processed_at) for [Inbox.Prune].
//
// # Partitioned outbox
//
// On PostgreSQL the outbox table can instead be partitioned by event time
// ([MigratePartitionedOutbox], or "outbox migrate --partition-interval
// 24h"), so that retention drops whole partitions instead of deleting rows:
// no dead tuples, no VACUUM work, and the table shrinks. The partition key
// is the event id: event ids are UUIDv7 ([runtime.NewEventID]), whose first
// 48 bits are the Unix millisecond of the event, and PostgreSQL compares
// uuid values bytewise, so a range of event ids is a range of time
// ([EventIDBound] gives the bounds). Partitioning by created_at would not
// do: every unique index of a partitioned table must contain the partition
// key, and the event id index, which deduplicates a second save of an event
// (the [Writer]'s ON CONFLICT (event_id) DO NOTHING), would only be unique
// within a partition. With the event id as the key it stays unique across
// the table; the primary key is (id, event_id), ids still come from one
// sequence, and the relay still reads in id order (a Merge Append over the
// partitions' pending indexes). A DEFAULT partition takes ids of other
// versions and events past the partitions created ahead.
//
// Nothing else changes: [NewWriter], [NewStore], the admin operations and
// [MigrateOutbox] (which leaves a partitioned table as it is) work on either
// table. A [Store] asks once whether its table is partitioned; if so its
// marks also bound the event ids (BETWEEN the batch's smallest and largest),
// so that PostgreSQL reads only the partitions that hold the batch.
// [Retention] detects a partitioned table at every pass and then:
//
//   - creates the partitions of the current interval and of
//     [PartitionConfig.Ahead] after it (default 3) that do not exist,
//     moving into each, in the same transaction, the rows of its range
//     that the DEFAULT partition holds (PostgreSQL refuses the partition
//     otherwise; RetentionResult.PartitionRowsMoved counts them);
//   - drops every partition whose upper bound is older than PublishedAge
//     (on the database's clock) and that holds no pending, retrying or
//     parked row. The drop is one transaction: DETACH PARTITION (which waits
//     for the transactions using the table, holds writers off until it
//     commits, and gives up after [PartitionConfig.LockTimeout], default
//     200ms, to be retried at the next pass), a check on the partition's
//     partial indexes, then DROP TABLE (DETACH ... CONCURRENTLY would not
//     hold writers off, but it cannot run in a transaction, so the check
//     and the drop would not be atomic, and PostgreSQL refuses it while a
//     DEFAULT partition exists). A partition that holds an
//     unpublished row is kept (RetentionResult.PartitionsKept, logged) and
//     dropped at a later pass once the row is published or discarded;
//   - deletes old published rows batch by batch from the DEFAULT partition
//     only.
//
// What differs from delete-based retention: the age is counted from the
// event's time (its id), not from its publication, and rows are kept up to
// one Interval longer than the age (a partition goes once its newest
// possible event is older than the age). Partitioning is chosen when the
// table is created: [MigratePartitionedOutbox] refuses an existing plain
// table ([ErrNotPartitioned]) and changes nothing in it. Each partition
// adds a few locks and index probes to every statement that cannot prune
// it (the claim reads every partition's pending index), so keep a few
// dozen partitions, not hundreds: daily partitions for a week's retention
// are 12 with the DEFAULT and 3 ahead. Event ids that are not UUIDv7 but
// happen to fall in a time partition's range (1 chance in millions for a
// random UUID) are dropped with that partition.
//
// # Debezium
//
// The outbox table can be read by Debezium's Outbox Event Router instead of
// the relay (a change-data-capture relay: do not run both on one table).
// Every row a [Writer] writes has what the router needs, under these names:
//
//	transforms=outbox
//	transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
//	transforms.outbox.table.field.event.id=event_id
//	transforms.outbox.table.field.event.key=aggregate_id
//	transforms.outbox.table.field.event.type=event_type
//	transforms.outbox.table.field.event.payload=payload
//	transforms.outbox.route.by.field=aggregate_type
//	transforms.outbox.table.fields.additional.placement=event_type:header:event_type,event_version:header:event_version,aggregate_type:header:aggregate_type,occurred_at:header:occurred_at,headers:header:headers
//
// route.by.field=aggregate_type routes by aggregate type, Debezium's
// convention ("outbox.event.<aggregate type>" by default); to get the
// topics the relay publishes to, route by topic instead
// (route.by.field=topic, route.topic.replacement=${routedByValue}). The
// headers column is one JSON object of strings (correlation id, W3C trace
// context, custom headers), carried as one header. The event id is the
// message's id, as with the relay, so consumers deduplicate the same way.
// The router ignores updates and deletes, so rows can be deleted by age
// once Debezium has read them (rows it reads stay pending for
// [Store.DeletePublished], which deletes only published rows).
package sqlstore
