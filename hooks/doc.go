// Package hooks writes the events that aggregates record to the outbox table
// in the same database transaction that saves the aggregates, through a GORM
// plugin. The table itself — its schema, the SQL of each database, and the
// relay's view of it ([sqlstore.Store]) — belongs to package
// [github.com/gooutbox/outbox/runtime/sqlstore], whose Writer the plugin
// writes through ([sqlstore.Writer]); GORM users hand the relay's store db.DB().
//
// The hooks folder holds everything of gooutbox that imports GORM: this
// plugin, its Migrate, GORM as a driver of the storage layer ([NewDriver]:
// the relay's store and the consumer's inbox on a *gorm.DB, with handlers
// that take a *gorm.DB), and the GORM test databases of package
// hooks/hookstest (on runtime/runtimetest's). Nothing under runtime imports
// GORM: the storage layer, the relay and the consumer work through the
// driver seam of runtime/sqlstore.
//
// # Use
//
//	if err := hooks.Migrate(ctx, db, ""); err != nil { ... } // or run sqlstore.OutboxDDL yourself
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
// them. A statement that writes no row — an Update or Delete that matches
// none, a Create whose ON CONFLICT DO NOTHING or INSERT IGNORE skipped its
// row — writes no event and keeps the events pending, since the state
// change they describe did not happen. A statement of several models that
// wrote some of their rows but not all fails with [ErrAmbiguousWrite] (the
// row count does not say whose state changed), and so does ON CONFLICT DO
// NOTHING on MySQL, whose row count counts a skipped row as written; a
// DryRun session writes nothing. An aggregate saved as another model's
// association is written by GORM with an upsert that, unless the session
// sets FullSaveAssociations, updates only its foreign key: the plugin
// cannot tell that its own columns were not saved and writes its events,
// so save a changed aggregate itself, or with FullSaveAssociations.
// On MySQL use clause.Insert{Modifier: "IGNORE"} rather than ON CONFLICT DO
// NOTHING. TestStatementsThatWriteSomeRows covers these cases.
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
// # Topics and keys
//
// The relay publishes each event to its topic: by default the aggregate
// type ("Order" → "order", "OrderLine" → "order_line"). [Config.Topic] maps
// any event to another topic. The Kafka key is the aggregate id (the
// model's primary key after the save), so all events of one aggregate land
// on one partition, in commit order. The message UUID is the event id, and
// the metadata carries event_type, event_version, aggregate_type,
// aggregate_id and occurred_at, or the CloudEvents attributes (see package
// [github.com/gooutbox/outbox/runtime]). Give [Config.ValidateTopic] the
// broker's rules (kafka.ValidateTopic: letters, digits, '.', '_', '-', at
// most 249) and a save whose topic the broker would never take fails with a
// [*sqlstore.TopicError] naming the event; without it, the Kafka publisher
// parks such a message at its first attempt.
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
// index on it: every write skips the event ids that have a row already
// (see [sqlstore.Writer]).
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
// When a rollback means the change itself is abandoned (the business rule
// failed), reload the aggregate, or call its ClearEvents, before you use it
// again: otherwise its next save publishes the abandoned events.
//
// Where the plugin cannot follow the transaction precisely, it keeps the
// events pending instead of guessing, and a later save of the aggregate finds
// their committed rows and drops them: raw transaction-control SQL under
// PrepareStmt (GORM prepares raw statements; its own SavePoint and
// RollbackTo are followed), COMMIT executed as SQL, a transaction begun on a
// connection the plugin did not wrap (db.Connection, or a session derived
// before db.Use). Rows are deleted only by [sqlstore.Store.DeletePublished]; even if
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
// # Commit order, relays, schema
//
// Each aggregate's outbox ids follow commit order, whatever the write path
// (a save, or [Plugin.Enqueue], which takes no row lock): the writer takes
// a per-aggregate lock held until the transaction ends, on PostgreSQL an
// advisory lock and on MySQL a row of a lock table; SQLite serialises
// writers anyway. A Create whose primary key the database generates (an
// auto-increment id, a column default) takes no such lock: no other
// transaction can know the new aggregate before this one commits. A key set
// before the INSERT (by the application, in BeforeCreate, a natural key), an
// upsert, an update, a delete and Enqueue take it. Two transactions writing events of the same two
// aggregates in opposite orders can deadlock, as with row locks, and the
// application retries. How relays share the table, what happens to failed
// and poison messages, the schema and each database's specifics are
// described in package [sqlstore]. Events too large for the broker are best
// refused when they are written: [Config.MaxEventBytes] fails such a save
// with a [*sqlstore.EventTooLargeError].
//
// On MySQL and MariaDB (GORM's "mysql" dialector) the DSN needs
// parseTime=true, the default loc (UTC), and clientFoundRows=true: without
// it an UPDATE reports only the rows it changed, so GORM's Save of an
// unchanged row falls back to an insert and the plugin takes an update that
// matched its row for one that matched none. There is no LISTEN: the relay
// polls, or [Config.AfterCommit] wakes it in-process.
//
// # Troubleshooting
//
// relation "orders" does not exist (PostgreSQL) or no such table: orders
// (SQLite): the tables are not created for you. Create your own with
// db.AutoMigrate(&Order{}) (or your migrations), the outbox with [Migrate]
// (without GORM, sqlstore.Migrate) or the statements of
// sqlstore.OutboxDDL, and a consumer's inbox with consumer.Migrate or
// consumer.DDL. All are idempotent, but for one statement of OutboxDDL on
// MySQL/MariaDB (the relays table's ADD COLUMN session_lock, which fails with
// error 1060 once applied; the Migrate functions ignore it).
//
// database is locked (SQLITE_BUSY) with several goroutines writing to
// SQLite: SQLite lets one transaction write at a time and, without a busy
// timeout, fails the others at once. Open it as the quickstart does,
// sqlite.Open("file:app.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
// (glebarez/sqlite, modernc), so that they wait their turn. A transaction
// that reads before it writes (load, change, save in db.Transaction) can
// still fail at once with database is locked (517): SQLite cannot wait for a
// read lock to become a write lock. Add &_txlock=immediate so every
// transaction takes the write lock when it begins, or retry such
// transactions.
//
// The program saved an order but nothing reached the broker: the relay
// publishes rows after they commit; a program that exits right after
// db.Create leaves them pending (not lost: the next relay run publishes
// them). Keep the relay's Run going for the life of the process, or run the
// relay on its own (outbox relay, package adapters/cmd/outbox).
//
// # Debezium
//
// Every row the plugin writes has what Debezium's Outbox Event Router needs;
// the column mapping is in package sqlstore's documentation.
//
// # Tests
//
// The tests named here, and all but the package-internal ones, are in the
// folder internal/coretest/hooks, in a module
// of their own: they need SQLite, MySQL and an in-process Kafka, which this module
// does not require (see package runtime/runtimetest, "Running the
// repository's tests").
package hooks
