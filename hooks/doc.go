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
// SkipDefaultTransaction, a statement whose models have pending events runs
// in a transaction the plugin begins and commits itself; statements without
// events still run without one.
//
// Each event keeps the id it got when recorded, and the table has a unique
// index on it: every write is INSERT ... ON CONFLICT (event_id) DO NOTHING.
// That makes the recorder's life simple and safe:
//
//   - a save that rolls back (an error, a rolled-back savepoint) leaves the
//     events pending on the aggregate, so a retry of the same in-memory
//     aggregate writes them;
//   - two saves of one aggregate in one transaction write each event once;
//   - after a commit the plugin sees (GORM's own transaction, or one it began
//     itself) the events are dropped from the recorder and
//     [Config.AfterCommit] runs;
//   - the commit of an application transaction is invisible to GORM
//     callbacks, so after db.Transaction the events stay pending until the
//     aggregate is saved again (a later save in another transaction finds
//     their committed rows and drops them) or is discarded. A later save
//     therefore never writes them twice while their rows exist; rows are
//     deleted only by [Store.DeletePublished], so keep its retention longer
//     than an in-memory aggregate lives. Even past it, a re-sent event
//     carries its original id, which consumers deduplicate on.
//
// # Failed and poison messages
//
// A message the publisher did not take gets a failed attempt (attempts,
// last_error) and waits before it is claimed again ([StoreConfig.RetryDelay],
// doubling up to [StoreConfig.MaxRetryDelay], on the database's clock). Its
// aggregate's later messages wait behind it, so the aggregate's order holds;
// every other aggregate goes on. A message the broker will never take (the
// publisher says so with a [runtime.PermanentError], as adapters/kafka does
// for a message too large) is parked at once: it keeps parked_at and
// last_error, stops holding its aggregate back, and [Store.Unpark] puts it
// back once the cause is fixed. [StoreConfig.MaxAttempts] parks transient
// failures too, after that many attempts.
//
// # Schema
//
// [Migrate] creates the table, a unique index on event_id, a partial index on
// pending rows and, on PostgreSQL, a statement-level trigger that sends
// NOTIFY on the table's channel once per inserting transaction (no payload,
// so it never fails a business transaction). [DDL] returns the same
// statements for users who run their own migrations. PostgreSQL and SQLite
// are supported.
package hooks
