package relay

import (
	"fmt"
	"log/slog"
	"time"
)

// Default values of the [Config] fields. A zero field means its default.
const (
	DefaultBatchSize            = 1000
	DefaultPollInterval         = 100 * time.Millisecond
	DefaultNotifierPollInterval = time.Second
	DefaultMinBackoff           = 100 * time.Millisecond
	DefaultMaxBackoff           = 10 * time.Second
	DefaultShutdownTimeout      = 10 * time.Second
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

	// PollInterval is how long the relay waits for a wake-up (a
	// [Notifier] notification or a [Relay.Notify] call) before it claims
	// anyway. It bounds the delay of a message whose notification was lost.
	// Default: 1s ([DefaultNotifierPollInterval]) when the store implements
	// [Notifier], 100ms ([DefaultPollInterval]) otherwise or once its
	// Listen has reported errors.ErrUnsupported.
	PollInterval time.Duration

	// MinBackoff and MaxBackoff bound the exponential backoff after a
	// failed claim (the publisher or the store returned an error) and
	// before calling [Notifier.Listen] again after it failed. The n-th
	// consecutive failure waits a random duration between half and all of
	// min(MinBackoff * 2^(n-1), MaxBackoff). The backoff resets after a
	// successful claim.
	// Default: MinBackoff 100ms ([DefaultMinBackoff]) but at most
	// MaxBackoff; MaxBackoff 10s ([DefaultMaxBackoff]) but at least
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

	// Logger receives the relay's logs: Warn for failures the relay
	// handles itself (a failed claim or publish it retries, a lost
	// LISTEN connection), Info for start and stop, Debug per batch.
	// Default: nil, which discards everything.
	Logger *slog.Logger

	// OnBatch, when set, is called after every claim that claimed a message
	// or failed, from the goroutine running [Relay.Run]; it must not block.
	// Use it for metrics (throughput, failures, batch latency).
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
	// Duration is how long the claim took, publishing included.
	Duration time.Duration
	// Err is the error the store returned, nil when every claimed message
	// was published and marked.
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
}

// Validate reports whether c is usable: no field is negative and MinBackoff is
// not greater than MaxBackoff when both are set. The error wraps
// [ErrInvalidConfig] and names the field. Zero fields are valid (they mean
// their defaults).
func (c Config) Validate() error {
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"BatchSize", int64(c.BatchSize)},
		{"PollInterval", int64(c.PollInterval)},
		{"MinBackoff", int64(c.MinBackoff)},
		{"MaxBackoff", int64(c.MaxBackoff)},
		{"ShutdownTimeout", int64(c.ShutdownTimeout)},
	} {
		if f.value < 0 {
			return fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	if c.MinBackoff > 0 && c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff {
		return fmt.Errorf("%w: MinBackoff %v is greater than MaxBackoff %v", ErrInvalidConfig, c.MinBackoff, c.MaxBackoff)
	}
	return nil
}
