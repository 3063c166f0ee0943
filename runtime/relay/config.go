package relay

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// Default values of the [Config] fields. A zero field means its default.
const (
	DefaultBatchSize            = 1000
	DefaultPollInterval         = 100 * time.Millisecond
	DefaultNotifierPollInterval = time.Second
	DefaultMinBackoff           = 100 * time.Millisecond
	DefaultMaxBackoff           = 5 * time.Second
	DefaultShutdownTimeout      = 10 * time.Second
	DefaultMaxBatchBytes        = 8 << 20
	DefaultStoreTimeout         = 10 * time.Second
	DefaultPublishTimeout       = 30 * time.Second
	DefaultPublishConcurrency   = 4
	DefaultActivePollInterval   = 2 * time.Millisecond
	DefaultActivePeriod         = 100 * time.Millisecond
	DefaultCoalesceRows         = 8
	DefaultCoalesceMax          = 10 * time.Millisecond
	DefaultHandOverAfter        = 15 * time.Second
)

// Config tunes a [Relay]. The zero value is valid: every zero field means its
// documented default. Negative values are rejected by [Config.Validate].
type Config struct {
	// BatchSize is the most messages claimed (and published) at once. When a
	// batch comes back full the relay claims again at once instead of
	// waiting for a wake-up.
	// Default: 1000 ([DefaultBatchSize]). Keep it near the publisher's own batch
	// size (adapters/kafka: 1000).
	BatchSize int

	// MaxBatchBytes caps the payload bytes of one batch, so a backlog of
	// large events cannot take the relay's memory to BatchSize times their
	// size; a single message larger than the cap is still claimed, alone.
	// Default: 8 MiB ([DefaultMaxBatchBytes]).
	MaxBatchBytes int64

	// StoreTimeout bounds each call to the store ([Store.Claim],
	// [Store.Mark], [Releaser.Release]), so a database that stopped
	// answering (a half-open connection, say) fails the call instead of
	// stalling the relay; the relay backs off and tries again on another
	// connection. Default: 10s ([DefaultStoreTimeout]).
	StoreTimeout time.Duration

	// PublishTimeout bounds the publishing of one batch; a batch whose
	// lease ([Batch.Deadline]) ends sooner stops at the lease's end. When
	// it expires, the relay stops waiting for the publisher (and cancels
	// the messages' contexts), and the messages not acknowledged by then
	// are published again later. Default: 30s ([DefaultPublishTimeout]).
	PublishTimeout time.Duration

	// PublishConcurrency is how many topics of one batch are published at
	// the same time: a slow or failing topic then holds back only itself.
	// Default: 4 ([DefaultPublishConcurrency]).
	PublishConcurrency int

	// PollInterval is how long the relay waits for a wake-up (a
	// [Notifier] notification or a [Relay.Notify] call) before it claims
	// anyway. It bounds the delay of a message whose notification was lost.
	// Default: 1s ([DefaultNotifierPollInterval]) when the store implements
	// [Notifier], 100ms ([DefaultPollInterval]) otherwise or once its
	// Listen has reported errors.ErrUnsupported.
	PollInterval time.Duration

	// ActivePollInterval and ActivePeriod keep the relay polling while
	// messages keep coming. The relay claims again at once after a claim
	// that found messages (or after a short wait, for a fast stream: see
	// CoalesceRows); after one that found nothing, for ActivePeriod
	// after its last claim that found messages, it claims again every
	// ActivePollInterval (sooner on a wake-up) instead of waiting up to
	// PollInterval. A steady stream of messages is then picked up within
	// about one claim-publish round, or ActivePollInterval after a
	// lull, without any transaction having to wake the relay; only after ActivePeriod without
	// a message does the relay go idle, ask a [WakeRequester] store for a
	// notification, and wait for it (or PollInterval). An idle relay costs
	// nothing but the PollInterval claims; a busy one costs one claim per
	// ActivePollInterval when it finds nothing.
	// Default: ActivePollInterval 2ms ([DefaultActivePollInterval]) but at
	// most PollInterval; ActivePeriod 100ms ([DefaultActivePeriod]). The
	// active poll is the tail of the commit → publish latency at a steady
	// rate (an event committed just after an empty claim waits for the
	// next): relaybench's p99 at 1,000 events/s was 6.8 ms with 5ms and
	// 3.9 ms with 2ms, on the same machine, for no measurable CPU (the
	// claims of a steady stream find fewer messages each, and an empty
	// claim is one index probe).
	// ActivePeriod shorter than ActivePollInterval turns active polling off.
	ActivePollInterval time.Duration
	ActivePeriod       time.Duration

	// CoalesceRows and CoalesceMax gather a fast stream of messages into
	// fewer, larger batches, so that the relay's rounds (a claim, a
	// publish and a mark each, all on the machine and the database the
	// writers use) take less from the writers. After a round that claimed
	// at least CoalesceRows messages but not a full batch (the stream is
	// fast, and the claim left nothing behind), the relay waits
	// ActivePollInterval for every CoalesceRows messages it claimed, at
	// most CoalesceMax, before it claims again; after a smaller batch it
	// claims again at once, as it always did. A stream slower than about
	// CoalesceRows messages per round (a few thousand a second on a
	// 2-core machine) is published as soon as before; a faster one in
	// batches that grow with its rate, about every CoalesceMax, as a relay
	// polling every CoalesceMax publishes. A backlog is not slowed: its
	// batches are full. relaybench (8 GORM writers as fast as they go, a
	// relay running; same machine, 3 repetitions): the writers'
	// transactions/s went from 0.92× to 1.10× of those beside a batched
	// relay polling every 10ms; commit → publish p99 at 1,000 events/s
	// unchanged (4.0 ms).
	// Default: CoalesceRows 8 ([DefaultCoalesceRows]); CoalesceMax 10ms
	// ([DefaultCoalesceMax]) but at most PollInterval. A negative
	// CoalesceRows turns coalescing off.
	CoalesceRows int
	CoalesceMax  time.Duration

	// MinBackoff and MaxBackoff bound the exponential backoff after a
	// batch that failed as a whole (the store returned an error, or
	// nothing could be published: see [Relay.Run]) and before calling
	// [Notifier.Listen] again after it failed. The n-th consecutive
	// failure waits a random duration between half and all of
	// min(MinBackoff * 2^(n-1), MaxBackoff). The backoff resets after a
	// batch that did not fail as a whole.
	// Default: MinBackoff 100ms ([DefaultMinBackoff]) but at most
	// MaxBackoff; MaxBackoff 5s ([DefaultMaxBackoff]) but at least
	// MinBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration

	// ShutdownTimeout bounds how long a batch in flight when Run's context
	// is cancelled may still take. The batch keeps running on a context
	// detached from that cancellation (context.WithoutCancel), so its
	// messages are published and marked; when ShutdownTimeout expires first,
	// the context handed to the store and to the publisher (through
	// message.Context) is cancelled, the relay stops waiting for the
	// publisher, and the store releases the claim without marking anything:
	// the batch is published again later, possibly twice.
	// Default: 10s ([DefaultShutdownTimeout]).
	ShutdownTimeout time.Duration

	// HandOverAfter is how long a relay whose store divides the outbox
	// among relays ([HandOverer]: sqlstore.Store) goes on while nothing it
	// claims can be published because the broker fails, before it hands
	// its shards over to the other relays alive and stands aside, claiming
	// nothing, for HandOverAfter. A relay cut off from the broker alone
	// then holds its aggregates back for about HandOverAfter, not for as
	// long as the cut lasts. The time counts from the start of the first
	// round that failed as a whole, and it restarts once a round publishes
	// a message. A relay with no other relay alive keeps its shards. Each
	// hand-over within one streak of failures doubles the wait before the
	// next (up to 8 times HandOverAfter), so that relays that all fail (the
	// broker is down) pass the shards around ever more slowly. While a
	// hand-over is coming, a publish is cut short at its time (a publish
	// hanging on a cut-off connection must not put it off), unless the
	// store ([PeerCounter]: sqlstore.Store) says no other relay is alive
	// to take the shards: then the publish runs its course.
	// Default: 15s ([DefaultHandOverAfter]), as sqlstore's default
	// LeaseTTL: about as long as relays wait for a crashed one. Negative
	// turns hand-overs off.
	HandOverAfter time.Duration

	// Logger receives the relay's logs: Warn for failures the relay
	// handles itself (a failed claim or publish it retries, a lost
	// LISTEN connection), Info for start and stop, Debug per batch.
	// Default: nil, which means slog.Default(), so failures are visible
	// unless told otherwise. Pass slog.New(slog.DiscardHandler) to silence
	// it.
	Logger *slog.Logger

	// CloudEvents, when set, makes the relay publish every message as a
	// CloudEvent in binary content mode: its metadata holds the CloudEvents
	// attributes (ce_id, ce_type, ce_source, ce_time, ...; see
	// [runtime.CloudEvents]) instead of the native keys (event_id,
	// event_type, ...). The payload and the message UUID (the event id) are
	// the same in both. runtime/consumer reads either form, so upgrade
	// consumers to a version that does before turning this on.
	// Default: nil, the native metadata ([runtime.Envelope.Metadata]).
	CloudEvents *runtime.CloudEvents

	// OnBatch, when set, is called after every claim that claimed a message
	// or failed, from the goroutine running [Relay.Run], in batch order; it
	// must not block. A batch marked while the next one is published (see
	// [InFlightExcluder]) is reported once that mark has ended. Use it for
	// metrics (throughput, failures, batch latency).
	// Default: nil.
	OnBatch func(BatchResult)
}

// BatchResult describes one claim for [Config.OnBatch].
type BatchResult struct {
	// Claimed is the number of messages the store claimed.
	Claimed int
	// Published is the number of claimed messages the publisher accepted.
	// They are marked as published unless Err says the store failed to
	// mark them (or the shutdown timeout expired).
	Published int
	// Failed is the number of claimed messages that were not published;
	// Failures says which and why.
	Failed   int
	Failures []Failure
	// Full reports a batch that hit [Config.BatchSize] or came past half
	// of [Config.MaxBatchBytes] (the store stops before a message that
	// would overshoot the cap): the relay claims again at once.
	Full bool
	// Duration is how long the round took: the claim (unless the batch was
	// claimed ahead, while the batch before it was published and marked),
	// the publishing and the mark.
	Duration time.Duration
	// Messages are the claimed messages, in ID order (nil when the claim
	// failed or found nothing): those not listed in Failures were
	// published. The slice belongs to the relay; read it during the call
	// only.
	Messages []runtime.OutboxMessage
	// PublishDuration is how long publishing took: from the first Publish
	// call until the publisher had answered for every topic of the batch
	// (claim and mark excluded). Zero when nothing was claimed.
	PublishDuration time.Duration
	// PublishedAt is when the publisher had answered for every topic of
	// the batch, so the published messages were acknowledged by the broker
	// by then (each topic's a little earlier when a batch spans topics).
	// With a message's CreatedAt it gives its commit-to-publish lag. Zero
	// when nothing was claimed.
	PublishedAt time.Time
	// Err is the error the store returned (claiming or marking), nil when
	// the store did its part. Publishing failures are in Failures.
	Err error
}

// setDefaults replaces zero fields by their defaults. notifier reports whether
// the store implements [Notifier].
func (c *Config) setDefaults(notifier bool) {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
		if notifier {
			c.PollInterval = DefaultNotifierPollInterval
		}
	}
	if c.ActivePollInterval == 0 {
		c.ActivePollInterval = min(DefaultActivePollInterval, c.PollInterval)
	}
	if c.ActivePeriod == 0 {
		c.ActivePeriod = DefaultActivePeriod
	}
	if c.CoalesceRows == 0 {
		c.CoalesceRows = DefaultCoalesceRows
	}
	if c.CoalesceMax == 0 {
		c.CoalesceMax = min(DefaultCoalesceMax, c.PollInterval)
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
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.PublishConcurrency == 0 {
		c.PublishConcurrency = DefaultPublishConcurrency
	}
	if c.HandOverAfter == 0 {
		c.HandOverAfter = DefaultHandOverAfter
	}
}

// Validate reports whether c is usable: no field but HandOverAfter and CoalesceRows is negative, MinBackoff is
// not greater than MaxBackoff when both are set, and CloudEvents, when set,
// passes [runtime.CloudEvents.Validate]. The error wraps
// [ErrInvalidConfig] and names the field. Zero fields are valid (they mean
// their defaults).
func (c Config) Validate() error {
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"BatchSize", int64(c.BatchSize)},
		{"PollInterval", int64(c.PollInterval)},
		{"ActivePollInterval", int64(c.ActivePollInterval)},
		{"ActivePeriod", int64(c.ActivePeriod)},
		{"CoalesceMax", int64(c.CoalesceMax)},
		{"MinBackoff", int64(c.MinBackoff)},
		{"MaxBackoff", int64(c.MaxBackoff)},
		{"ShutdownTimeout", int64(c.ShutdownTimeout)},
		{"MaxBatchBytes", c.MaxBatchBytes},
		{"StoreTimeout", int64(c.StoreTimeout)},
		{"PublishTimeout", int64(c.PublishTimeout)},
		{"PublishConcurrency", int64(c.PublishConcurrency)},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate(); err != nil {
			return fmt.Errorf("%w: CloudEvents: %w", ErrInvalidConfig, err)
		}
	}
	if c.MinBackoff > 0 && c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff {
		return fmt.Errorf("%w: MinBackoff %v is greater than MaxBackoff %v", ErrInvalidConfig, c.MinBackoff, c.MaxBackoff)
	}
	return nil
}
