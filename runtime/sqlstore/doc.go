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
// because it needs no ORM and no particular database library: it reaches
// the database only through a small driver seam ([Executor], [Tx], [Conn],
// [DB], and [Driver] for drivers that unwrap their users' transactions;
// see driver.go), with three drivers:
//
//   - package runtime/sqlstore/databasesql: database/sql — a *sql.DB, and a
//     *sql.Tx or *sql.Conn or anything shaped like them (sqlc's DBTX for
//     database/sql) — on PostgreSQL, MySQL/MariaDB and SQLite;
//   - package runtime/sqlstore/pgxv5: pgx natively — a *pgxpool.Pool and a
//     pgx.Tx (sqlc's pgx/v5 target), LISTEN on a pool connection;
//   - package hooks: GORM (hooks.NewDriver), on GORM's pool and
//     transactions.
//
// So a relay process opens a pool and nothing else, and a service on pgx
// or sqlc gets the same writer and inbox as one on GORM. The store
// conformance suite (runtimetest.TestStore) runs through database/sql on
// each database and through pgx natively on PostgreSQL. The package does
// not import GORM, any SQLite driver or the MySQL driver (it knows
// go-sql-driver/mysql's errors by their type's name).
//
// Close the [Store] before the pool: a relay's session lock holds one of
// its connections until then, and pgxpool's Close waits for it.
//
// # Use
//
//	db, err := sql.Open("pgx", dsn)                               // or pgxv5.New(pool), hooks.NewDriver(gormDB)
//	drv := databasesql.New(db)
//	err = sqlstore.Migrate(ctx, drv, sqlstore.Schema{Outbox: true}) // or run Schema.DDL in your migration tool
//	store, err := sqlstore.NewStore(drv, sqlstore.StoreConfig{})  // the dialect comes from the driver
//	r, err := relay.New(store, publisher, relay.Config{})
//
// Without GORM (database/sql, sqlc, pgx), write the rows yourself in the
// business transaction: create a writer once with
// NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{}), then per
// transaction build each event's envelope with runtime.NewEnvelope(ctx,
// runtime.NewEventID(), evt, aggregateType, aggregateID) and call
// w.Write(ctx, databasesql.Executor(tx), []sqlstore.Row{{Topic: "orders",
// Envelope: env}}) — pgxv5.Executor(tx) for a pgx.Tx — before the commit
// (examples/sqlcpgx is a whole service so). The [Writer] keeps each
// aggregate's events in commit order, deduplicates on the event id and
// refuses an event above [WriterConfig.MaxEventBytes] (1 MB) with an
// [*EventTooLargeError] (TestWriterRefusesAnEventTooLarge).
//
// # Dialects
//
// A [Dialect] is named by GORM's dialector name or a driver name
// ([ParseDialect]), or read from a *sql.DB's driver ([DialectOf]: pgx's
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
// Measured: a relay whose process dies (SIGKILL, OOM, a lost host) is
// replaced in about a second on PostgreSQL and MySQL/MariaDB. Each relay
// registers its session lock (pg_try_advisory_lock, GET_LOCK) in the relays
// table's session_lock column (after upgrading, run outbox migrate or
// [Migrate], which adds it), and a relay that finds a registered
// relay's lock free, and still free 750 ms later, takes its shards: a
// standby, or the dead relay's own restart (TestDeadRelayIsTakenOverInASecond:
// 0.83 – 1.04 s on PostgreSQL, 0.96 – 1.09 s on MariaDB, with the default
// 15-s LeaseTTL; a relay started after the only one died: 0.77 s on both;
// the correctness suite's crash fault kills the shard holder right after a
// renewal and bounds the takeover at 1 s + a poll + 0.5 s). A relay whose
// own lock session ends while it lives stops publishing within 700 ms of
// the start of its last check answered (it checks every 200 ms), before
// the grace ends, however late that answer came; a relay whose checks go
// unanswered that long (a slow network, a paused process) abandons its
// batches and claims nothing until one is answered, keeping its lock and
// its shards. Relays that name the table differently
// (schema-qualified or not) fall back to lease expiry. A relay that is
// paused or cut off from its database keeps its session, so it loses its
// shards after LeaseTTL and logs "relay: lease lost" at Warn with why when
// it wakes; a standby, which looks for free shards every 250 ms, takes them
// then (TestStandbyTakesOverADeadLeaderOnlyOnceItsLeasesExpire, and the
// correctness suite's SIGSTOP of the active relay, whose relays run with a
// LeaseTTL of 2 s: all 64 shards moved, the probes published 2.1 s after
// the stop, bound 3.7 s; with the default 15 s, a killed relay's shards move
// 15 – 17 s after the kill, and a standby logs "relay: standing by" at start
// and "relay: shards held" when it takes them). The leases live in the
// database, so this holds on SQLite and MariaDB too (tested with separate
// stores in one process; SQLite serialises the lease transactions of
// several processes). A relay cut off from its broker alone hands its
// shards over after relay.Config.HandOverAfter (package runtime/relay).
// When a relay joins, the others give shards back only once no batch of
// those shards is in flight, so every published batch is marked by the
// relay that published it and no event goes out twice because of a
// rebalance (TestNoShardGivenBackUnderABatchInFlight,
// TestSeveralRelaysKeepAggregateOrder).
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
// With Kafka, a partition that is down holds back only the aggregates
// routed to it.
//
// # Schema
//
// [Migrate] (or [OutboxDDL], for users who run their own migrations)
// creates the table with a unique index on event_id and partial indexes on
// blocked (waiting or parked) and parked rows; on PostgreSQL the queue of
// its pending rows (see "The queue" below; MySQL, MariaDB, SQLite and a
// partitioned PostgreSQL table have a partial index of pending rows
// instead); the two small tables
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
// The inbox table ([InboxDDL], [Migrate]) has one row per applied
// event and consumer, keyed (consumer, event_id), with an index on
// (consumer, processed_at) for [Inbox.Prune].
//
// # Operating it
//
//   - Run the relay in the application process (go rl.Run(ctx)) or on its own
//     (outbox relay). Run several for availability: by default one publishes
//     and the others stand by, taking its shards over at once when it stops
//     cleanly, within LeaseTTL (15 s) when it dies, and after HandOverAfter
//     (15 s) when it cannot reach the broker. StoreConfig.MaxActiveRelays
//     (outbox relay --max-active-relays) lets up to that many publish at once,
//     each with an even share of the aggregates: worth measuring when the
//     round trips to the broker limit one relay and the database has cores to
//     spare, since sharing relays cost the database more per event (see
//     package adapters/harness/relaybench).
//   - Watch the backlog: store.Stats(ctx) gives the pending and retrying
//     messages, the parked ones, and the age of the oldest pending message; an
//     age that keeps growing means the relay or the broker is stuck. Package
//     adapters/metrics exports it to Prometheus with the relay's and the
//     consumers' counters, runtime/health turns it into /livez and /readyz,
//     outbox status and runtime/dashboard show it per topic and event type,
//     and adapters/tracing follows one event from the save to the handler.
//   - Parked messages (too large for the broker, or past
//     StoreConfig.MaxAttempts) keep their last_error and hold their
//     aggregate's later events back, so its order holds; fix the cause, then
//     store.Unpark(ctx, ids...) (outbox parked retry, the dashboard's retry),
//     or drop them with store.Discard(ctx, ids...) (outbox parked discard).
//   - Retention: run sqlstore.NewRetention beside the relay, outbox relay
//     --retention 7d, or outbox janitor on its own (see Retention below):
//     it deletes published rows older than PublishedAge (7 days) in small
//     batches that never block writers or the relay. Keep the age longer
//     than an in-memory aggregate lives (a re-saved aggregate is deduplicated
//     against these rows) and than any replay you may want (outbox replay,
//     Store.Replay).
//   - Consumers: the same retention prunes the inbox (RetentionConfig.Inbox,
//     --inbox-retention; an inbox on a database of its own: outbox janitor
//     --inbox-only --inbox-retention 14d --db <its URL>), or call
//     c.PruneInbox(ctx) (on the consumer.Consumer), which deletes entries
//     older than Config.InboxRetention (7 days); keep it longer than any
//     redelivery (topic retention, offset resets) and any replay.
//
// # Retention
//
// A [Retention] (ret, err := sqlstore.NewRetention(store,
// sqlstore.RetentionConfig{...}), then go ret.Run(ctx)) deletes published outbox rows older than PublishedAge
// (default 7 days) and, with Inbox/InboxDB, inbox markers older than InboxAge
// (default 7 days; every consumer, or InboxConsumers), every Interval (default
// 1 min), BatchSize rows (default 1,000) per statement, each batch its own
// short transaction. OnPass reports each pass (for metrics). It never waits
// for writers or the relay, nor they for it:
//
//   - PostgreSQL: DELETE … WHERE id IN (SELECT id … ORDER BY id LIMIT n FOR
//     UPDATE SKIP LOCKED) AND published before the cutoff (published_at, or
//     with the queue, created_at of a row neither queued, parked nor
//     requeued): rows another transaction holds are left for the next
//     batch, and the outer condition is checked again on the row's latest
//     version, so a row that replay made pending meanwhile is not deleted.
//     Writers only insert and the relay only updates pending rows. The pass
//     then takes out of the queue the entries of rows older than the age
//     that are no longer pending (see "The queue").
//   - MySQL/MariaDB: a READ COMMITTED transaction selects the batch FOR UPDATE
//     SKIP LOCKED and deletes it by primary key. Under the default REPEATABLE
//     READ a DELETE … ORDER BY id LIMIT n would lock every row and gap it
//     scans, pending rows and the insert position included.
//   - SQLite: one batch holds the single write lock; writers wait at most that
//     long.
//
// There is no index on published_at (it would cost every mark an index
// insertion): a batch walks the primary key from the oldest row. So that a
// pass does not also read every published row younger than the age, it first
// finds the last row created before the age by a binary search over the
// primary key (ids grow with created_at; a few dozen point reads) and deletes
// only up to it. A pass with nothing to delete over 200,000 young published
// rows: PostgreSQL 99–124 ms → 0.5–1.4 ms, SQLite 54 ms → 0.2 ms (MariaDB's
// optimizer already answered from its (published_at, parked_at, id) index: 0.6
// ms → 0.4 ms). outbox purge (Store.DeletePublished) still walks. Leave
// BatchPause at 0 on SQLite: its busy handler polls, so a pass that pauses
// loses the write lock to the writers at every batch (100,000 rows took 28 s
// with 5 ms pauses, 1 s without).
//
// One pass over 100,000 published rows older than the age, batch 1,000, while
// 4 writers insert events (go test -run '^$' -bench Retention -benchtime 1x
// ./internal/coretest/sqlstore/; the shared 2-core machine; runs 1–2 at load average
// about 10, run 3 at about 5):
//
//	| database | rows deleted/s (runs 1 / 2 / 3) | writers' inserts/s: idle → during the pass | InnoDB row lock waits during the pass |
//	|---|---|---|---|
//	| SQLite | 68.6k / 103k / 333k | 1,479 → 2,321 / 1,679 → 677 / 4,562 → 189 | — |
//	| PostgreSQL 15 | 40.4k / 81.8k / 142k | 1,154 → 951 / 1,299 → 1,943 / 3,603 → 1,592 | — |
//	| MariaDB 10.11 | 23.9k / 25.6k / 30.0k | 1,345 → 423 / 3,059 → 797 / 1,911 → 1,544 | 0 |
//	| MariaDB, the earlier DELETE … ORDER BY id LIMIT 1000 (REPEATABLE READ) | 4.4k | → 25 | 19,627 |
//
// Writers never waited for a row lock of the retention (MariaDB counts them:
// 0); what they lose during a pass is the machine's two cores and the
// database's I/O, shared with the deletes. SQLite has one write lock: its
// writers get little while a pass runs (0.3 s for 100,000 rows in run 3). The
// earlier MariaDB statement locked the rows and gaps it scanned, pending rows
// and the insert position included, and throttled writers to 25 inserts/s; the
// PostgreSQL statement never conflicted with inserts, and now also passes over
// rows a replay holds.
//
// Table size under delete-based retention (PostgreSQL, 3 rounds of 500,000
// events of 7 bytes of payload each, published, then deleted by one retention
// pass, then VACUUM): 201 MB after the first round, and 257 MB after the
// second and the third: the deleted rows' space is reused once vacuumed, so
// the table settles at about 1.3 times its live window instead of growing, but
// it does not shrink. The passes deleted 21k, 29k and 79k rows/s (load average
// 10–12).
//
// # The queue
//
// On PostgreSQL (a plain table; not a partitioned one) the pending rows are
// listed in a narrow table, <table>_queue ([QueueTable]: qid, the row's id,
// its primary key, and qshard, its shard). A statement trigger on the
// outbox table, <table>_enqueue, adds the rows each INSERT wrote that are
// not published or parked, in one INSERT per writer statement that reads
// the statement's new rows (a transition table); it runs as the queue's
// owner, so writers need no privilege on the queue. A relay that holds
// every shard (the default: one relay active) and drains a backlog (its
// last claim was at least half full) claims the rows of the queue's first
// entries in id order: while those entries lie close together, it reads
// the table's rows between the first and the last in key order, checking
// each against the entries, and fills what those rows leave of the batch
// (rows held by an aggregate that waits) by walking the queue after them;
// when they are spread wide, it walks the queue from its head instead,
// reading each row by its primary key, as relays sharing the outbox, and a
// relay claiming a few rows at a time, always do.
// Its published mark is a DELETE of the batch's entries from the queue,
// fenced by its shards: it does not write the outbox row at all, where
// setting published_at wrote a new row version and its index entries
// (pg_stat_statements, one drain of 50,000 events: the mark's UPDATE 7.8 µs
// per row, the queue's DELETE 2.1 µs). Only a row that had failed before
// gets published_at (and loses its next_attempt_at) when it is published.
// So, on PostgreSQL:
//
//   - published means neither queued nor parked; published_at is set only
//     on rows published after a failure, replayed, by pgcdc, or by an
//     earlier version. [Entry.PublishedAt] is zero on the others.
//   - [Retention] and [Store.DeletePublished] count a published row's age
//     from its created_at when it has no published_at.
//   - A parked row leaves the queue; [Store.Unpark] and [Store.Replay] put
//     rows back in it in the statement that makes them pending (with
//     next_attempt_at the epoch, which holds nothing back and tells
//     retention they are not published).
//   - Queries of your own for the backlog read the queue: SELECT count(*)
//     FROM outbox_messages_queue, or join it on qid = id.
//
// [Migrate] brings a table of an earlier version to it once, in its
// transaction: it creates the queue and the trigger (writers wait for the
// transaction), queues the pending rows and drops the pending index.
// Relays of earlier versions claim by published_at, which the queue's mark
// leaves NULL, and would publish every row again: the migration takes
// their shards from them, and a guard on <table>_leases (a row trigger,
// <table>_lease_guard) gives a shard only to a relay registered as knowing
// the queue. So during a rolling upgrade the relays of the earlier version
// stand by (their claims find no shard) while the new ones publish. A row
// published or parked by a process that does not know the queue is
// passed over by the claim, and a retention pass takes its entry out.
//
// # No retention at all
//
// [StoreConfig.DeletePublished]: a store with
// DeletePublished: true deletes each row as its message is published, the
// table holds only what is still to be sent, and nothing needs retention.
// Where the mark would set published_at (MySQL, MariaDB, SQLite, a
// partitioned PostgreSQL table) the DELETE is also the cheaper mark (on
// PostgreSQL before the queue: 1.55× the drain rate of the UPDATE in one
// run). On a plain PostgreSQL table the default mark is already a DELETE,
// of the queue's entries, which leaves the rows for replay: DeletePublished
// deletes the rows as well and drains no faster (0.91–0.94× of the default
// in relaybench). What it gives up: outbox replay and the
// dashboard's published views find nothing, and an event saved again after its
// row was published and deleted (an application retrying a save whose commit
// reported an error but went through) is written and published a second time,
// where a kept row would have deduplicated it; consumers with an inbox still
// apply it once. Choose it when throughput matters more than replaying from
// the outbox (a broker that keeps its own history, such as Kafka with its
// retention, can replay from there instead). The relay process takes it as
// outbox relay --delete-published.
//
// # Partitioned outbox
//
// On PostgreSQL the outbox table can instead be partitioned by event time
// ([Migrate], or "outbox migrate --partition-interval
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
// [Migrate] (which leaves a partitioned table as it is) work on either
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
// table is created: [Migrate] refuses an existing plain
// table ([ErrNotPartitioned]) and changes nothing in it. Each partition
// adds a few locks and index probes to every statement that cannot prune
// it (the claim reads every partition's pending index), so keep a few
// dozen partitions, not hundreds: daily partitions for a week's retention
// are 12 with the DEFAULT and 3 ahead. Event ids that are not UUIDv7 but
// happen to fall in a time partition's range (1 chance in millions for a
// random UUID) are dropped with that partition.
//
// [Migrate] has a runnable example
// (ExampleMigratePartitionedOutbox). On a partitioned table the bounded
// marks pay: with the 15 partitions of the comparison below (600,000 events,
// two runs each, the bound switched off by a temporary patch for the
// second), the relay drained 83.7k and 83.5k events/s with the bound, 65.1k
// and 57.1k without it.
//
// # Partitioned or plain
//
// newest 200,000, which one relay (sqlstore.Store, a publisher that
// acknowledges at once) drains; then one retention pass with a 7-day age; then
// 200,000 more events drained; then VACUUM. PostgreSQL 15 (128 MB shared
// buffers) on the shared 2-core machine, one run at load average 1–2:
//
//	| | plain table, delete-based retention | partitioned by day, partitions dropped |
//	|---|---:|---:|
//	| fill (one INSERT … SELECT per 250,000 rows) | 89 s | 68 s |
//	| relay events/s, full table | 80,036 | 67,959 |
//	| size before retention (table, indexes, every partition) | 4,354 MB | 4,539 MB |
//	| retention pass | 44.7 s (3,001,082 rows deleted, 3,002 batches) | 0.30 s (3 partitions dropped) |
//	| rows before → after | 10,000,000 → 6,998,918 | 10,000,000 → 7,823,334 |
//	| size after the pass | 4,354 MB (nothing returned) | 3,571 MB |
//	| dead tuples after the pass | 3,201,082 | 178,000 (the relay's marks only) |
//	| relay events/s after the pass (before any VACUUM) | 79,710 | 75,669 |
//	| size after 200,000 more events and VACUUM | 4,528 MB | 3,753 MB |
//
// The relay is about as fast on either: the full-table figures differ by 15%,
// the after-pass ones by 5%, within this machine's run-to-run noise (a
// 2,000,000-event run had the partitioned table ahead, 83.9k against 80.0k
// events/s). Deleting cost 15 µs per row here (67,000 rows/s, plus the VACUUM
// of every deleted row), and the file never shrinks (the space is reused once
// vacuumed); dropping a partition costs milliseconds whatever it holds (0.30 s
// for three partitions of 2.2 million rows) and gives the disk back. The
// partitioned table kept 824,000 more rows: its oldest kept partition reaches
// up to a day past the age.
//
// Delete-based retention is the default and the right
// choice for most: every database, any event id, the age counted from
// publication, nothing to create ahead, and at up to about a million events a
// day a pass every minute deletes that minute's 700 rows in about 10 ms and
// autovacuum keeps up. Partition the PostgreSQL outbox when it carries
// millions of events a day (at 10 million a day, deleting costs about 2.5
// minutes of database time a day at the rate above, plus the VACUUM, and the
// table stays at its high-water mark), or when the table's bloat, the
// retention's deletes or their VACUUM show up on the database: retention then
// costs well under a second a day however many events there were, creates no
// dead tuples, and returns the space. The price: ids should be UUIDv7 (the
// default), the age counts from the event's time and is rounded up to a
// partition, and every statement that cannot prune reads each partition's
// index once. Keep its interval such that the retention window is a few dozen
// partitions (daily for a week, hourly for a day or two), and keep retention
// running (the relay's --retention or outbox janitor), since it also creates
// the partitions ahead.
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
//
// # Tests
//
// The tests named here, and all but the package-internal ones, are in the
// folder internal/coretest/sqlstore, in a module
// of their own: they need SQLite and MySQL, which this module
// does not require (see package runtime/runtimetest, "Running the
// repository's tests").
package sqlstore
