// Package hooks writes the events that aggregates record to the outbox table
// in the same database transaction that saves the aggregates, through a GORM
// plugin, and gives the relay its view of that table ([Store]).
//
// # Use
//
//	if err := hooks.Migrate(ctx, db, ""); err != nil { ... } // or run DDL yourself
//	plugin, err := hooks.New(hooks.Config{})
//	if err != nil { ... }
//	if err := db.Use(plugin); err != nil { ... }
//
//	order.Place(clock, ...)        // records OrderPlaced on the embedded runtime.Recorder
//	err = db.Save(&order).Error    // the order row and its outbox row commit together
//
// Events not tied to a saved model go in with [Plugin.Enqueue] inside the
// caller's transaction.
//
// # What writes events
//
// The plugin's callbacks run in GORM's create, update and delete chains, after
// the statement's own work and before GORM commits: Create (of a struct, a
// pointer, a slice; CreateInBatches), Save, Update/Updates through a model,
// and Delete (soft and hard). Every model of the statement that embeds
// [runtime.Recorder] contributes its pending events; associations that are
// aggregates contribute through the nested statements GORM runs to save
// them. An Update or Delete that affects no row writes nothing and keeps the
// events pending, since the state change they describe did not happen.
//
// Raw SQL (db.Exec, db.Raw) and sessions with SkipHooks write no events; the
// events stay pending on the aggregate. The plugin's own inserts go straight
// to the statement's connection and never re-enter GORM callbacks.
//
// The aggregate type is the GORM schema name in snake_case ("OrderLine" →
// "order_line") and the aggregate id the primary key after the save; a model
// overrides them with [AggregateTyper] and [AggregateIDer]. The topic is the
// aggregate type unless [Config.Topic] says otherwise.
//
// # Atomicity and the recorder's lifetime
//
// The outbox rows are inserted through the statement's own connection, so
// they join its transaction: the one GORM opens for a single statement, the
// application's (db.Transaction, db.Begin) or a savepoint inside it. With
// SkipDefaultTransaction, a statement that may write events runs in a
// transaction the plugin begins and commits itself: one whose models have
// pending events, or whose model embeds a recorder and has model hooks
// (BeforeSave, AfterCreate, ...), since a hook may record events after the
// plugin has to decide. Other statements still run without one, at no cost.
//
// Each event keeps the id it got when recorded, and the table has a unique
// index on it: every write is INSERT ... ON CONFLICT (event_id) DO NOTHING,
// or on MySQL, which has no such clause, a plain INSERT that is retried row
// by row, leaving out the duplicates, when it hits an existing event id.
//
// The plugin sees every commit and rollback. [Plugin.Initialize] wraps the
// database's connection pool (inside GORM's prepared-statement pool with
// PrepareStmt; db.DB() still returns the *sql.DB), so each transaction begun
// on it — GORM's own, db.Transaction, db.Begin()...Commit(), the one
// CreateInBatches opens, the plugin's — reports its Commit and Rollback,
// and follows the SAVEPOINT, ROLLBACK TO and RELEASE statements run in it
// (GORM's nested db.Transaction, SavePoint and RollbackTo). Hence:
//
//   - when a transaction commits, the events written in it are dropped from
//     their recorders, and [Config.AfterCommit] runs once if it inserted
//     outbox rows;
//   - a rollback (an error, a panic in db.Transaction, tx.Rollback()) and a
//     savepoint rolled back inside a transaction that commits leave those
//     events pending on the aggregate, so a retry of the same in-memory
//     aggregate writes them;
//   - two saves of one aggregate in one transaction write each event once;
//   - a save that finds an event's row already committed by another
//     transaction (a copy of the aggregate saved earlier) drops the event.
//
// Where the plugin cannot follow the transaction precisely, it keeps the
// events pending instead of guessing, and a later save of the aggregate finds
// their committed rows and drops them: raw transaction-control SQL under
// PrepareStmt (GORM prepares raw statements; its own SavePoint and
// RollbackTo are followed), COMMIT executed as SQL, a transaction begun on a
// connection the plugin did not wrap (db.Connection, or a session derived
// before db.Use). Rows are deleted only by [Store.DeletePublished]; even if
// an event is written again after that, it carries its original id, which
// consumers deduplicate on.
//
// # Panics in event code
//
// A panic in event code during a save — a typed-nil event, an event's
// Validate or MarshalJSON, an aggregate's AggregateType or AggregateID — is
// recovered by the plugin and fails the save with a [*WriteError] wrapping a
// [*PanicError] (value and stack). It is not re-panicked: as an error it
// takes the path every failed save takes, so GORM rolls back its own
// transaction, the plugin its own, and db.Transaction receives the error
// from the function and rolls back; the transaction never stays open
// holding the aggregate's row lock, and the events stay pending. A panic
// in the application's own model hooks is outside the plugin: GORM does not
// recover it, and an application that recovers it must roll back the
// transaction itself (db.Transaction does).
//
// # Commit order
//
// The relay publishes an aggregate's events in outbox id order, so ids must
// follow commit order per aggregate, whatever the write path. Ids come from
// a sequence when a row is inserted, not when it commits, so two
// transactions writing events of one aggregate could commit in the other
// order. On PostgreSQL every insert therefore first takes a
// transaction-scoped advisory lock per aggregate (pg_advisory_xact_lock, in
// one sorted batch per statement): a second transaction writing events of
// the same aggregate waits at its insert until the first commits or rolls
// back. An aggregate saved through GORM is usually under its row lock
// already, which costs the lock nothing extra; [Plugin.Enqueue], which takes
// no row lock, is what needs it. Two transactions that write events of the
// same two aggregates in opposite orders can deadlock, as with row locks:
// PostgreSQL aborts one, and the application retries it. SQLite serialises
// writing transactions, so its ids follow commit order anyway.
//
// MySQL's named locks (GET_LOCK) belong to the session and outlive the
// commit, so on MySQL and MariaDB the lock is a row lock instead: before the
// outbox rows get their ids, the insert upserts the rows of its aggregates'
// slots in <table>_locks (INSERT ... ON DUPLICATE KEY UPDATE, in slot order;
// 65,536 slots by hash, so two aggregates rarely share one, and when they do
// they only wait for each other), and InnoDB holds those row locks until the
// transaction ends. An insert outside a transaction (Enqueue on a plain
// *gorm.DB) runs in a transaction of its own for the same reason. A
// deadlock is reported as MySQL error 1213, and the application retries.
//
// # Several relays
//
// [Store] divides the outbox between relays by shard: each row carries one
// of [Shards] shards, computed from its aggregate ([ShardOf]), and relays
// hold leases on an even share of the shards. An aggregate is published by
// one relay at a time, and no transaction stays open while a relay
// publishes. A relay that stops cleanly hands its shards over at once; one
// that is killed, paused or cut off loses them when its lease runs out
// ([StoreConfig.LeaseTTL], 15s by default) and can no longer mark their
// rows.
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
// [Store.Discard] deletes it (the later messages then go out). Events too
// large for the broker are best refused when they are written:
// [Config.MaxEventBytes] fails such a save with an [*EventTooLargeError].
//
// # Schema
//
// [Migrate] creates the table with a unique index on event_id and partial
// indexes on pending, blocked (waiting or parked) and parked rows; the two
// small tables relays share it through (<table>_leases, one row per shard,
// and <table>_relays); and, on PostgreSQL, a statement-level trigger that
// sends NOTIFY on the table's channel once per inserting transaction (no
// payload, so it never fails a business transaction). Payloads and headers
// are TEXT: the exact JSON the event marshalled to, with no parse cost on
// insert (JSONB would also refuse a NUL character, which JSON allows as
// \u0000). [DDL] returns the same statements for users who run their own
// migrations, and brings a table of an earlier version up to date. Table
// names are at most 49 bytes, so that the names derived from them fit in
// PostgreSQL's 63-byte identifiers. PostgreSQL, SQLite, MySQL 8 and MariaDB
// 10.6+ are supported; each database's SQL lives in one file of this package
// (dialect_<name>.go) behind one internal interface.
//
// On MySQL and MariaDB (GORM's "mysql" dialector, or [NewSQLStore] with
// "mysql" on github.com/go-sql-driver/mysql) the DSN needs parseTime=true,
// the default loc (UTC), and clientFoundRows=true: without it an UPDATE
// reports only the rows it changed, so GORM's Save of an unchanged row falls
// back to an insert and the plugin takes an update that matched its row for
// one that matched none. The tables are InnoDB, utf8mb4 with binary
// collation (aggregate ids compare as on PostgreSQL); aggregate_type,
// aggregate_id, event_type and topic are VARCHAR(255), payload LONGTEXT,
// times DATETIME(6) in UTC on the database's clock. With no partial
// indexes, the pending rows are the (NULL, NULL) prefix of an index on
// (published_at, parked_at, id), read in id order, and the rows that hold
// their aggregate back are found through a virtual column, blocked (1 on
// an unpublished row that failed or is parked, NULL otherwise), indexed
// with the aggregate. Leases are taken with SELECT ... FOR UPDATE SKIP LOCKED. There is no
// LISTEN: the relay polls, or [Config.AfterCommit] wakes it in-process.
// interpolateParams=true saves a round trip per statement that has
// arguments.
//
// # Debezium
//
// The table can be read by Debezium's Outbox Event Router instead of the
// relay (a change-data-capture relay: do not run both on one table). Every
// row the plugin writes has what the router needs, under these names:
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
// topics this package's relay publishes to, route by topic instead
// (route.by.field=topic, route.topic.replacement=${routedByValue}). The
// headers column is one JSON object of strings (correlation id, W3C trace
// context, [Config.Headers]), carried as one header. The event id is the
// message's id, as with the relay, so consumers deduplicate the same way.
// The router ignores updates and deletes, so rows can be deleted by age
// once Debezium has read them (rows it reads stay pending for
// [Store.DeletePublished], which deletes only published rows).
package hooks
