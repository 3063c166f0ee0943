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
// index on it: every write is INSERT ... ON CONFLICT (event_id) DO NOTHING.
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
