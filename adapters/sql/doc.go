// Package sql is a Watermill [message.Publisher] and [message.Subscriber] on
// PostgreSQL: each topic is a table, written and read through
// github.com/ThreeDotsLabs/watermill-sql/v4, configured so that nothing is
// skipped or reordered.
//
// The package is named sql like watermill-sql's own package, which users of
// this one know; import database/sql beside it under another name when both
// are needed (this package's tests use stdSQL). Most programs never import it
// directly: package adapters/broker opens it from a postgres:// URL.
//
// # What it configures
//
//   - Schema: watermill-sql's DefaultPostgreSQLSchema, whose rows carry the
//     inserting transaction's id (transaction_id xid8, pg_current_xact_id())
//     and whose SELECT reads only rows of transactions older than every
//     transaction still running (transaction_id < pg_snapshot_xmin), in
//     (transaction_id, offset) order. So a row committed after a later
//     offset was already read is not skipped, which a plain offset (BIGSERIAL)
//     cursor does. Its payload column is BYTEA instead of the default JSON,
//     so any payload is stored as given.
//     The price: a row becomes visible to subscribers only once every
//     transaction that was running when it was inserted has ended, in the
//     whole database, not only on this table. A long transaction (a batch
//     job, a session left idle in transaction) delays delivery on every
//     topic until it ends; keep such work out of the database the broker
//     tables live in, or keep transactions short.
//   - Offsets: DefaultPostgreSQLOffsetsAdapter, one row per consumer group
//     locked FOR UPDATE while a batch is delivered, so the subscribers of a
//     group take turns and each group reads the topic in order.
//   - Tables are created on first use (AutoInitializeSchema for the
//     publisher, InitializeSchema for the subscriber): "watermill_<topic>"
//     and "watermill_offsets_<topic>", in the connection's search_path, the
//     same tables a plain watermill-sql publisher or subscriber with these
//     adapters uses.
//
// # Publishing
//
// [Publisher.Publish] inserts all its messages with one INSERT statement, so
// they are committed together or not at all, in the order given, and it
// returns only after the commit. A call with more messages than one
// statement can carry ([MaxMessagesPerInsert]) is split into several
// statements, in order; if one fails, the error is a [runtime.PublishErrors]
// that says which messages were committed.
//
// Errors that no retry can fix are wrapped with [runtime.Permanent]: a topic
// name that cannot be a table name ([ErrInvalidTopic]: empty, longer than
// [MaxTopicLength] bytes, or with a character outside A-Z a-z 0-9 - $ : . _),
// and PostgreSQL data exceptions (SQLSTATE class 22, e.g. a message UUID
// longer than the uuid column's 36 characters, or a NUL byte in it) and
// program-limit errors (class 54). Every other error (connection refused or
// lost, timeouts, a server shutting down, lock or serialization failures) is
// returned as it is, to be retried.
//
// # Subscribing
//
// [NewSubscriber] reads a topic in the consumer group
// [SubscriberConfig.ConsumerGroup]: every group receives every message; the
// subscribers of one group share them. Each subscription delivers one
// message at a time, in order; a nacked message is delivered again after
// [SubscriberConfig.ResendInterval] before any later one, and a message not
// acked within [SubscriberConfig.AckDeadline] is delivered again. The offset
// is committed once per batch, so a crash delivers the batch's acked
// messages again: delivery is at least once.
//
// Each subscription holds one connection, with a transaction open, while it
// delivers a batch. A pool bounded by SetMaxOpenConns needs a connection for
// every subscription and one more for publishing; with fewer, subscriptions
// wait for each other's AckDeadline (Watermill's suite, with 40 connections
// for about 100 subscriptions, stalled).
//
// Messages are never deleted: a topic's table grows until you delete old
// rows yourself (rows whose transaction_id and offset every group's
// watermill_offsets_<topic> row has passed).
//
// # MySQL
//
// MySQL and MariaDB are not supported: watermill-sql's MySQL schema reads
// rows by AUTO_INCREMENT offset, so a row whose transaction commits after a
// row with a higher offset has been read is skipped for good.
//
// # Error classes
//
// [Publisher.Publish] classes each failure for the outbox store
// (sqlstore.StoreConfig.MaxAttempts): permanent ([runtime.PermanentError],
// parked at once) for an invalid topic and data the database refuses;
// transient ([runtime.TransientError], retried without counting an
// attempt) for a bad or closed connection (driver.ErrBadConn,
// sql.ErrConnDone), network errors, and, for drivers whose errors have a
// SQLState method (pgx, lib/pq), SQLSTATE class 08 (connection exception),
// class 53 (insufficient resources), 57P01 to 57P03 (shutdown, crash,
// cannot connect now), 40001 and 40P01 (serialization failure, deadlock).
// Anything else counts toward MaxAttempts; MySQL errors are not classed
// (they count).
//
// # Broker URL
//
// Importing the package registers postgres:// and postgresql:// with package adapters/broker,
// so that broker.Open (and the outbox command's relay) opens them; the
// parameters are documented on openPostgres (go doc -u).
//
// The package is a module of its own (go get
// github.com/gooutbox/outbox/adapters/sql), so that a program that does
// not use it does not require its client.
package sql
