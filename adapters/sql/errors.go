package sql

import "errors"

// ErrInvalidConfig is wrapped by the errors of [PublisherConfig.Validate],
// [SubscriberConfig.Validate], [NewPublisher] and [NewSubscriber] when a
// setting is missing or out of range.
var ErrInvalidConfig = errors.New("sql: invalid config")

// ErrInvalidTopic is wrapped, inside a [runtime.PermanentError], by the error
// of [Publisher.Publish] and returned wrapped by [Subscriber.Subscribe] for a
// topic name that cannot name a table.
var ErrInvalidTopic = errors.New("sql: invalid topic name")

// ErrPublisherClosed is returned by [Publisher.Publish] after
// [Publisher.Close].
var ErrPublisherClosed = errors.New("sql: publisher closed")

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] after
// [Subscriber.Close].
var ErrSubscriberClosed = errors.New("sql: subscriber closed")

// ErrNotPostgres is wrapped by the error of [NewPublisher] and
// [NewSubscriber] for a *sql.DB whose driver is another database's
// (go-sql-driver/mysql, a SQLite driver): the package's SQL is
// PostgreSQL's, and every publish would fail, retryably, for good.
var ErrNotPostgres = errors.New("sql: not a PostgreSQL database")

// ErrLegacySchema is wrapped by the errors of [Publisher.Publish] (inside a
// [runtime.TransientError]: the messages are retried, not parked),
// [Subscriber.Subscribe] and [Subscriber.SubscribeInitialize] when a
// topic's tables have the layout of watermill-sql's DefaultPostgreSQLSchema
// and DefaultPostgreSQLOffsetsAdapter, which this package used before it
// gave offsets in commit order. [Upgrade] converts them.
var ErrLegacySchema = errors.New("sql: topic tables have watermill-sql's default layout")
