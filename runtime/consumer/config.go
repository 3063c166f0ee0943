package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Default values of the [Config] fields. A zero field means its default.
const (
	DefaultTable          = sqlstore.InboxDefaultTable
	DefaultMaxRetries     = 3
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultNackDelay      = time.Second
	DefaultMaxNackDelay   = time.Minute
	DefaultInboxRetention = 7 * 24 * time.Hour
	DefaultPruneBatchSize = 1000
	DefaultTxTimeout      = 30 * time.Second
	DefaultBatchSize      = 100
	// MaxBatchSize is the largest [Config.BatchSize].
	MaxBatchSize = sqlstore.MaxInboxBatch
)

// Action is what a consumer does with a message it has no way to apply: an
// unknown event type or an unknown event version.
type Action int

const (
	// ActionDefault means the field's documented default.
	ActionDefault Action = iota
	// ActionNack leaves the message unacked: it is nacked after
	// [Config.NackDelay] and delivered again, so it is neither lost nor
	// applied until a deployment that knows it runs. It blocks the messages
	// behind it on the same partition.
	ActionNack
	// ActionSkip acks the message without applying it.
	ActionSkip
	// ActionDeadLetter publishes the message to [Config.DeadLetterTopic]
	// with the reason, then acks it. It needs [Config.DeadLetterPublisher].
	ActionDeadLetter
)

// String returns "default", "nack", "skip" or "dead_letter".
func (a Action) String() string {
	switch a {
	case ActionDefault:
		return "default"
	case ActionNack:
		return "nack"
	case ActionSkip:
		return "skip"
	case ActionDeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Config configures a [Consumer]. Name is required; every other field's zero
// value means its documented default. Negative durations and counts other
// than MaxRetries are rejected by [Config.Validate].
type Config struct {
	// Name identifies the consumer in the inbox: each (Name, event id) is
	// applied once. Two consumers of the same events with different effects
	// need different names; instances of one service share one. It is also
	// the value of [MetadataDeadLetterConsumer]. Required.
	Name string

	// DB is the database of the inbox and of the handlers' transactions,
	// through any of the storage layer's drivers: hooks.NewDriver(gormDB)
	// for handlers that take a *gorm.DB, databasesql.New(sqlDB) for a
	// *sql.Tx, pgxv5.New(pool) for a pgx.Tx (see [Handle]). PostgreSQL,
	// SQLite, and MySQL 8 or MariaDB 10.6+ are supported; the dialect is
	// DB.Dialect(). Create the table with [Migrate] or [DDL]. A consumer
	// with only [HandleWithoutInbox] handlers leaves it nil.
	// Default: nil.
	DB sqlstore.DB

	// Table is the inbox table, optionally schema-qualified. It must be a
	// plain SQL identifier.
	// Default: "outbox_inbox" ([DefaultTable]).
	Table string

	// MaxRetries is how many times a failing handler (or inbox
	// transaction) is run again within one delivery, with exponential
	// backoff between runs, before the consumer gives up on the delivery:
	// it dead-letters the message (handler errors, when a dead-letter
	// publisher is configured) or nacks it. A negative value means no
	// retry.
	// Default: 3 ([DefaultMaxRetries]).
	MaxRetries int

	// TxTimeout bounds one attempt of a handler registered with [Handle]:
	// its inbox transaction (begin, the marker insert, the handler, commit)
	// runs under a context with this timeout, and the handler's ctx and tx
	// carry it. When it passes, the statement in flight fails (the driver
	// abandons it: pgx closes the connection, so a half-open connection
	// leaves the pool instead of stalling the partition until the kernel
	// gives up, ~15 minutes), database/sql rolls the transaction back, and
	// the attempt fails with an [*InboxError] wrapping [ErrTxTimeout]: it is
	// retried (MaxRetries) and then nacked, never dead-lettered, since a
	// slow database is not the message's fault. On PostgreSQL the
	// transaction also sets statement_timeout and
	// idle_in_transaction_session_timeout to TxTimeout (SET LOCAL), so the
	// server ends a transaction whose client is gone and releases its
	// inbox marker's lock, which the redelivery would otherwise wait on.
	// MySQL and MariaDB have no SET LOCAL: the transaction runs on a
	// connection of its own, sets the session's wait_timeout and
	// innodb_lock_wait_timeout to TxTimeout in whole seconds (rounded up),
	// and restores the session's own values on that connection after it
	// commits or rolls back, which bounds an abandoned transaction (its
	// COMMIT lost to a half-open connection included) and a wait on a
	// marker's lock in the same way; a statement still running when the
	// client vanishes runs to its end first (MySQL's max_execution_time
	// covers only SELECT, and neither server has a per-transaction
	// statement timeout). go-sql-driver/mysql sends COMMIT and ROLLBACK
	// without a context: an attempt whose transaction has not returned a
	// second after TxTimeout gives it up, leaving it and its connection to
	// the driver (until TCP gives up: set readTimeout and writeTimeout in
	// the DSN to bound that too), and fails with ErrTxTimeout.
	//
	// The deadline reaches only what honours the context: the handler's
	// statements through tx (do not replace its context), and whatever the
	// handler itself passes ctx to. A handler blocked elsewhere, ignoring
	// ctx, holds the delivery, and so its partition, until it returns; its
	// later statements through tx then fail and nothing commits. Set
	// TxTimeout above the slowest legitimate handler run: one that always
	// takes longer is retried and nacked forever.
	// Handlers registered with [HandleWithoutInbox] run without it, under
	// the message's context.
	// Default: 30s ([DefaultTxTimeout]).
	TxTimeout time.Duration

	// MinBackoff and MaxBackoff bound the wait between retries: the n-th
	// retry waits a random duration between half and all of
	// min(MinBackoff * 2^(n-1), MaxBackoff). The wait ends early, failing
	// the delivery, when the message's context is cancelled.
	// Default: MinBackoff 100ms ([DefaultMinBackoff]) but at most
	// MaxBackoff; MaxBackoff 5s ([DefaultMaxBackoff]) but at least
	// MinBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// NackDelay is how long the consumer holds a message it is about to
	// nack (outcomes nacked and failed) before it returns, so that a
	// subscriber that redelivers a nacked message at once does not spin.
	// The wait ends early when the message's context is cancelled.
	// Each time the same message (by UUID) is nacked again, the wait
	// doubles, up to MaxNackDelay; it starts over once the message is
	// acked.
	// Default: 1s ([DefaultNackDelay]).
	NackDelay time.Duration

	// MaxNackDelay caps the doubling of NackDelay for a message nacked
	// again and again (a newer version no deployment handles yet, a
	// database outage).
	// Default: 1m ([DefaultMaxNackDelay]), but at least NackDelay.
	MaxNackDelay time.Duration

	// UnknownType is what happens to a message whose event type the
	// registry does not know: [ActionSkip] (ack; reported as
	// [OutcomeSkipped]), [ActionDeadLetter] or [ActionNack].
	// Default: ActionSkip.
	UnknownType Action

	// UnknownVersion is what happens to a message whose version of a known
	// type the registry does not know, typically a version written by a
	// newer deployment of the producer: [ActionNack] (retry later; reported
	// as [OutcomeNacked]) or [ActionDeadLetter]. ActionSkip is rejected:
	// it would lose the event.
	// Default: ActionNack.
	UnknownVersion Action

	// DeadLetterPublisher publishes the messages the consumer gives up on
	// to DeadLetterTopic: handler errors after the retries, undecodable
	// and malformed messages, and unknown types or versions whose policy
	// is [ActionDeadLetter]. Without it those messages are nacked and
	// retried forever, which loses nothing but stalls their partition.
	// Default: nil.
	DeadLetterPublisher message.Publisher

	// DeadLetterTopic is the topic of dead-lettered messages. Setting it
	// without DeadLetterPublisher is an error. The topic must exist, or the
	// publisher must create it: a publish that fails leaves the message
	// nacked, as without a publisher (kafka.PublisherConfig creates no
	// topic unless AllowAutoTopicCreation is set).
	// Default: Name + ".dlq".
	DeadLetterTopic string

	// InboxRetention is how long inbox entries are kept: [Consumer.PruneInbox]
	// deletes older ones. A redelivery of an event whose entry is gone is
	// applied again, so keep it longer than any redelivery horizon: the
	// topic's retention (an offset reset replays everything retained), and
	// how far back the outbox could be republished.
	// Default: 7 days ([DefaultInboxRetention], Kafka's default retention).
	InboxRetention time.Duration

	// PruneBatchSize is the most entries one DELETE of
	// [Consumer.PruneInbox] removes, so pruning never holds long locks.
	// Default: 1000 ([DefaultPruneBatchSize]).
	PruneBatchSize int

	// Clock stamps inbox entries (processed_at) and computes the pruning
	// cutoff.
	// Default: [runtime.SystemClock].
	Clock runtime.Clock

	// Logger receives the consumer's logs: Warn for what it handles
	// itself (a retry, a dead-lettered, skipped or nacked message), Debug
	// per message. Every delivery that is skipped, dead-lettered, nacked
	// or failed gets one line: "consumer: message skipped", "consumer:
	// message dead-lettered", or "consumer: message nacked" for the
	// outcomes nacked and failed (an unknown version, an undecodable or
	// malformed message or a handler that kept failing without a
	// dead-letter publisher, an inbox failure, a failed dead-letter
	// publish), with the keys event_id,
	// event_type, event_version, topic, message_uuid, attempt (when the
	// handler ran), reason, error, nacks (how many times in a row the
	// message has been nacked, this one included) and backoff (the nack
	// delay before the next try). [Consumer.Run] logs the same line each
	// time it holds a message back to try it again in place; with
	// [Consumer.HandlerFunc] a router logs the returned error as well.
	//
	// A message that keeps failing, stalling its partition, would log
	// that line (and the retry lines of each of its deliveries) every
	// NackDelay to MaxNackDelay, forever. So its lines are at Warn only on
	// its 1st, 2nd, 4th, 8th, ... nack in a row (nacks a power of two:
	// about a dozen in a day at the default delays) and at Debug on the
	// others; a delivery's retry lines take the level of the nack that
	// would end it. A delivery cut short by its context (shutdown) is
	// logged at Debug. Errors the consumer's functions return (New, Run,
	// ...) are not logged. To silence it, pass
	// slog.New(slog.DiscardHandler).
	// Default: nil, which means [slog.Default] as it is when [New] is
	// called, so that a failure is visible without configuration.
	Logger *slog.Logger

	// BatchSize is the most consecutive messages of one partition
	// [Consumer.Run] applies in one transaction: their inbox markers (one
	// statement on PostgreSQL and SQLite), the handlers' writes, one
	// commit; then it acks them all. Run takes what the partition's stream
	// has already delivered, up to BatchSize, waiting up to BatchWait for
	// more; under a backlog batches fill, and a lone message is applied as
	// soon as it arrives. 1 applies one message per transaction. It must be
	// at most [MaxBatchSize]. It also bounds the groups of
	// [Config.MaxTransactions].
	// Default: 100 ([DefaultBatchSize]).
	BatchSize int

	// MaxTransactions, when above 0, is the most inbox transactions
	// [Consumer.HandlerFunc] runs at once. A Watermill router calls it
	// concurrently, one delivery per partition; a delivery that comes
	// while MaxTransactions of them run waits, and the next transaction
	// to start applies the deliveries waiting (up to BatchSize) together:
	// their inbox markers in one statement, their handlers one after the
	// other, one commit, as [Consumer.Run] applies a batch. If any of
	// them fails, the transaction rolls back and each is applied in a
	// transaction of its own, as without this setting (its handler may
	// then have run twice; its effects in the transaction commit once).
	//
	// Set it where the consumer's or the database's CPU is what limits
	// the router, as with a database on the same small machine: there
	// fewer round trips and commits per event make up for fewer
	// transactions at once (on 2 cores, 8 partitions, MaxTransactions 2:
	// see adapters/harness/relaybench). Where the database is across a
	// network, the round trips' latency limits a partition, and
	// transactions at once (one per partition) go faster: leave it 0.
	// [Consumer.Run] ignores it.
	// Default: 0 (no limit: one transaction per delivery).
	MaxTransactions int

	// BatchWait is how long [Consumer.Run] waits for a batch to fill once
	// it has its first message. It delays a message by at most that much
	// when its partition is quiet.
	// Default: 0 (take what is already delivered, wait for nothing).
	BatchWait time.Duration

	// StartHandler, when set, is called before each call of a handler with
	// the context the handler would get, the message's topic and its
	// envelope (whose Headers carry the W3C trace context the relay
	// injected); the handler gets the returned context, and end is called
	// with the handler's error (nil on success, a *PanicError after a
	// panic). It is how adapters/tracing's Tracer.StartHandler puts a
	// CONSUMER span in the handler's context on every path, the router's
	// and [Consumer.Run]'s batches alike; it must not block. With it set,
	// do not also wrap the router handler with that Tracer's Handler.
	// Default: nil.
	StartHandler func(ctx context.Context, topic string, env runtime.Envelope) (handlerCtx context.Context, end func(error))

	// OnOutcome, when set, is called once per delivery with its [Result],
	// from the goroutine that handled the message, before the handler
	// function returns (so before the ack). Use it for metrics; it must not
	// block.
	// Default: nil.
	OnOutcome func(Result)
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	} else if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	if c.TxTimeout == 0 {
		c.TxTimeout = DefaultTxTimeout
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
		if c.MaxBackoff > 0 {
			c.MinBackoff = min(c.MinBackoff, c.MaxBackoff)
		}
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.MaxNackDelay == 0 {
		c.MaxNackDelay = DefaultMaxNackDelay
	}
	if c.NackDelay == 0 {
		c.NackDelay = DefaultNackDelay
	}
	if c.UnknownType == ActionDefault {
		c.UnknownType = ActionSkip
	}
	if c.UnknownVersion == ActionDefault {
		c.UnknownVersion = ActionNack
	}
	if c.DeadLetterTopic == "" && c.DeadLetterPublisher != nil {
		c.DeadLetterTopic = c.Name + ".dlq"
	}
	if c.InboxRetention == 0 {
		c.InboxRetention = DefaultInboxRetention
	}
	if c.PruneBatchSize == 0 {
		c.PruneBatchSize = DefaultPruneBatchSize
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Clock == nil {
		c.Clock = runtime.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether c is usable. Zero fields other than Name are
// valid, since they mean their defaults. The error wraps [ErrInvalidConfig]
// (or [ErrInvalidTable]) and names the field.
func (c Config) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("%w: Name is required", ErrInvalidConfig)
	}
	if c.Table != "" {
		if err := validTable(c.Table); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"TxTimeout", int64(c.TxTimeout)},
		{"MinBackoff", int64(c.MinBackoff)},
		{"MaxBackoff", int64(c.MaxBackoff)},
		{"NackDelay", int64(c.NackDelay)},
		{"MaxNackDelay", int64(c.MaxNackDelay)},
		{"InboxRetention", int64(c.InboxRetention)},
		{"PruneBatchSize", int64(c.PruneBatchSize)},
		{"BatchSize", int64(c.BatchSize)},
		{"BatchWait", int64(c.BatchWait)},
		{"MaxTransactions", int64(c.MaxTransactions)},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	if c.BatchSize > MaxBatchSize {
		return fmt.Errorf("%w: BatchSize %d is more than %d", ErrInvalidConfig, c.BatchSize, MaxBatchSize)
	}
	if c.MinBackoff > 0 && c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff {
		return fmt.Errorf("%w: MinBackoff %v is greater than MaxBackoff %v", ErrInvalidConfig, c.MinBackoff, c.MaxBackoff)
	}
	switch c.UnknownType {
	case ActionDefault, ActionNack, ActionSkip, ActionDeadLetter:
	default:
		return fmt.Errorf("%w: UnknownType is %v", ErrInvalidConfig, c.UnknownType)
	}
	switch c.UnknownVersion {
	case ActionDefault, ActionNack, ActionDeadLetter:
	case ActionSkip:
		return fmt.Errorf("%w: UnknownVersion cannot be ActionSkip (it would lose events; use ActionNack or ActionDeadLetter)", ErrInvalidConfig)
	default:
		return fmt.Errorf("%w: UnknownVersion is %v", ErrInvalidConfig, c.UnknownVersion)
	}
	if c.DeadLetterPublisher == nil {
		if c.UnknownType == ActionDeadLetter {
			return fmt.Errorf("%w: UnknownType is ActionDeadLetter but DeadLetterPublisher is nil", ErrInvalidConfig)
		}
		if c.UnknownVersion == ActionDeadLetter {
			return fmt.Errorf("%w: UnknownVersion is ActionDeadLetter but DeadLetterPublisher is nil", ErrInvalidConfig)
		}
		if c.DeadLetterTopic != "" {
			// Nothing would be dead-lettered: the messages it names would
			// be retried forever instead.
			return fmt.Errorf("%w: DeadLetterTopic is %q but DeadLetterPublisher is nil", ErrInvalidConfig, c.DeadLetterTopic)
		}
	}
	dialect, err := c.dialect()
	if err != nil {
		return err
	}
	// INSERT IGNORE would truncate a longer name to the column's 255
	// characters, merging the inboxes of two consumers.
	if dialect == DialectMySQL && utf8.RuneCountInString(c.Name) > sqlstore.MaxInboxConsumerName {
		return fmt.Errorf("%w: Name is longer than %d characters, the inbox's consumer column on MySQL", ErrInvalidConfig, sqlstore.MaxInboxConsumerName)
	}
	return nil
}

// dialect returns the inbox dialect of the configured database, "" for
// none. The error wraps [ErrInvalidConfig] or [ErrUnsupportedDialect].
func (c Config) dialect() (string, error) {
	if c.DB == nil {
		return "", nil
	}
	if v := reflect.ValueOf(c.DB); v.Kind() == reflect.Pointer && v.IsNil() {
		return "", fmt.Errorf("%w: DB is a nil %T", ErrInvalidConfig, c.DB)
	}
	d, err := c.DB.Dialect()
	if err != nil {
		return "", fmt.Errorf("%w: DB: %w", ErrInvalidConfig, inboxErr(err))
	}
	return dialectOf(string(d))
}
