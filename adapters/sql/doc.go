// Package sql is a Watermill [message.Publisher] and [message.Subscriber] on
// PostgreSQL: each topic is a table, read through the subscriber loop of
// github.com/ThreeDotsLabs/watermill-sql/v4 with this package's schema, so
// that nothing is skipped or reordered and nothing outside a topic's own
// tables can hold its delivery back.
//
// The package is named sql like watermill-sql's own package, which users of
// this one know; import database/sql beside it under another name when both
// are needed (this package's tests use stdSQL). Most programs never import it
// directly: package adapters/broker opens it from a postgres:// URL.
//
// # Tables
//
// A topic T has three tables, in the connection's search_path:
//
//   - "watermill_T": the messages, keyed by "offset" (BIGINT), with uuid,
//     created_at, payload (BYTEA: any payload is stored as given) and
//     metadata (JSON).
//   - "watermill_seq_T": one row, the last offset given. A Publish advances
//     it and inserts its messages at the offsets after it in one statement
//     (one per [MaxMessagesPerInsert] messages),
//     so the row stays locked until that statement commits: the topic's
//     publishers take turns for the length of one INSERT, and offsets are
//     given in commit order. A subscriber that sees offset n therefore sees
//     every offset below it, and reads by offset alone.
//   - "watermill_offsets_T": one row per consumer group, its last acked
//     offset, locked FOR UPDATE while a batch is delivered, so the
//     subscribers of a group take turns and each group reads the topic in
//     order.
//
// So a message held unacked holds back its own group on its own topic and
// nothing else, and a long transaction anywhere on the server (a batch job,
// a session left idle in transaction, a subscriber's own) holds back no
// delivery. watermill-sql's DefaultPostgreSQLSchema, which this package
// used before, could not say that: it read only rows of transactions older
// than the server's oldest running one (transaction_id <
// pg_snapshot_xmin), so any open transaction stalled every topic. Tables
// of that layout are refused with [ErrLegacySchema]; [Upgrade] converts
// them once, keeping every message, its order and every group's position.
//
// Tables are created on first use (CREATE TABLE IF NOT EXISTS, under an
// advisory lock) unless [PublisherConfig.SkipSchemaInitialization] or
// [SubscriberConfig.SkipSchemaInitialization]; [CreateStatements] returns
// the statements for migrations.
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
// wait for each other's AckDeadline.
//
// Messages are never deleted: a topic's table grows until you delete old
// rows yourself: rows whose offset every group's "offset_acked" has passed
// (the counter row, not the table, says which offset comes next).
//
// # MySQL
//
// MySQL and MariaDB are not supported: the statements are PostgreSQL's, and
// a *sql.DB of another driver is refused with [ErrNotPostgres].
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
