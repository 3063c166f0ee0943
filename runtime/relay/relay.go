package relay

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
)

// Log attribute keys, defined once so every log line uses the same names.
const (
	attrTopic           = "topic"
	attrOutboxID        = "outbox_id"
	attrMessages        = "messages"
	attrError           = "error"
	attrAttempt         = "attempt"
	attrBackoff         = "backoff"
	attrClaimed         = "claimed"
	attrPublished       = "published"
	attrDuration        = "duration"
	attrBatchSize       = "batch_size"
	attrPollInterval    = "poll_interval"
	attrNotifier        = "notifier"
	attrShutdownTimeout = "shutdown_timeout"
)

// Relay moves messages from a [Store] to a Watermill message.Publisher:
// it claims a batch, publishes it, lets the store mark what was published, and
// repeats. Create one with [New] and start it with [Relay.Run].
//
// A Relay is safe for concurrent use: [Relay.Notify] and [Relay.Running] may
// be called from any goroutine.
type Relay struct {
	store    Store
	notifier Notifier // the store as a Notifier, or nil
	pub      message.Publisher
	cfg      Config
	log      *slog.Logger

	// poll is the poll interval in force, a time.Duration. It starts at
	// cfg.PollInterval and drops to DefaultPollInterval when the store
	// turns out unable to notify and PollInterval was left at its default.
	poll          atomic.Int64
	pollDefaulted bool

	wake        chan struct{} // capacity 1: a pending wake-up
	running     chan struct{} // closed by markRunning
	runningOnce sync.Once
	active      atomic.Bool // a Run call is in progress
}

// New returns a relay that claims messages from store and publishes them with
// pub. It applies the defaults documented on [Config] and returns an error
// wrapping [ErrInvalidConfig] when cfg is invalid (see [Config.Validate]), or
// an error when store or pub is nil.
//
// If store also implements [Notifier], [Relay.Run] listens for its
// notifications and polls less often (see [Config.PollInterval]).
//
// The relay never closes pub; the caller does, after Run has returned.
func New(store Store, pub message.Publisher, cfg Config) (*Relay, error) {
	if store == nil {
		return nil, errors.New("relay: nil store")
	}
	if pub == nil {
		return nil, errors.New("relay: nil publisher")
	}
	notifier, _ := store.(Notifier)
	pollDefaulted := cfg.PollInterval == 0
	cfg.setDefaults(notifier != nil)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Relay{
		store:         store,
		notifier:      notifier,
		pub:           pub,
		cfg:           cfg,
		log:           logger,
		pollDefaulted: pollDefaulted,
		wake:          make(chan struct{}, 1),
		running:       make(chan struct{}),
	}
	r.poll.Store(int64(cfg.PollInterval))
	return r, nil
}

// Run relays messages until ctx is cancelled. It blocks.
//
// Each round claims up to [Config.BatchSize] messages with [Store.Claim] and
// publishes them. After a full batch Run claims again at once; otherwise it
// waits for a wake-up: a [Notifier] notification, a [Relay.Notify] call, or
// [Config.PollInterval] elapsing. When a claim fails (the publisher or the
// store returned an error), Run logs the failure at Warn and backs off
// exponentially between [Config.MinBackoff] and [Config.MaxBackoff] before
// claiming again. Such errors never make Run return: it keeps retrying until
// ctx is cancelled.
//
// If the store implements [Notifier], Run calls [Notifier.Listen] in a
// goroutine and, when Listen fails, logs the error and calls it again after a
// backoff; polling goes on meanwhile. When Listen reports
// errors.ErrUnsupported, Run stops calling it and polls as for a store that
// is not a Notifier (every 100ms unless PollInterval is set).
//
// When ctx is cancelled Run stops claiming, lets the batch in flight finish
// (bounded by [Config.ShutdownTimeout]), stops listening, and returns nil. It
// returns [ErrRunning] at once if another Run on the same relay has not
// returned yet. Run may be called again after it has returned.
func (r *Relay) Run(ctx context.Context) error {
	if !r.active.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.active.Store(false)
	if ctx.Err() != nil {
		return nil
	}

	listenCtx, stopListening := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopListening()
	if r.notifier != nil {
		wg.Go(func() { r.listen(listenCtx) })
	} else {
		r.markRunning()
	}

	r.log.Info("relay: started",
		attrBatchSize, r.cfg.BatchSize,
		attrPollInterval, r.cfg.PollInterval,
		attrNotifier, r.notifier != nil)
	defer r.log.Info("relay: stopped")

	poll := time.NewTimer(time.Duration(r.poll.Load()))
	defer poll.Stop()
	failures := 0 // consecutive failed claims
	for ctx.Err() == nil {
		res, failed, timedOut := r.claim(ctx)
		// Partial: the publisher took some messages and refused others,
		// and the store marked what went out (failed is nil when the store
		// itself failed, the marking say, which calls for a backoff).
		partial := res.Err != nil && len(failed) > 0 && res.Published > 0 && !timedOut && ctx.Err() == nil
		if partial {
			// The publisher works: the failed messages stay pending in the
			// store (which may delay their retry) and the relay goes on
			// without backing off.
			r.logFailure(res, failed, 1, 0)
		}
		if res.Err != nil && !partial {
			if timedOut {
				r.log.Warn("relay: shutdown timeout exceeded, batch released",
					attrClaimed, res.Claimed,
					attrShutdownTimeout, r.cfg.ShutdownTimeout,
					attrError, res.Err)
				break
			}
			failures++
			var wait time.Duration
			if ctx.Err() == nil {
				wait = r.backoff(failures)
			}
			r.logFailure(res, failed, failures, wait)
			if wait == 0 || !sleep(ctx, wait) {
				break
			}
			continue
		}
		failures = 0
		if res.Claimed > 0 {
			r.log.Debug("relay: batch published",
				attrClaimed, res.Claimed,
				attrPublished, res.Published,
				attrDuration, res.Duration)
		}
		if res.Claimed >= r.cfg.BatchSize {
			continue
		}
		poll.Reset(time.Duration(r.poll.Load()))
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-poll.C:
		}
	}
	return nil
}

// Notify wakes the relay: a waiting [Relay.Run] claims at once, and a Run in
// the middle of a batch claims again right after it. Notifications are
// coalesced, so Notify never blocks and is safe to call from any goroutine,
// typically right after a transaction that wrote outbox rows commits, for
// stores that cannot notify (SQLite). Calling Notify while no Run is running
// is harmless.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Running returns a channel that is closed once [Relay.Run] has started its
// loop and, when the store implements [Notifier], the first [Notifier.Listen]
// call is listening (or has failed: polling covers for it). It stays closed
// after Run returns.
func (r *Relay) Running() <-chan struct{} {
	return r.running
}

func (r *Relay) markRunning() {
	r.runningOnce.Do(func() { close(r.running) })
}

// claim runs one claim. It returns what happened, the topics the publisher
// failed, and whether the batch was cut short by [Config.ShutdownTimeout].
func (r *Relay) claim(ctx context.Context) (res BatchResult, failed []*PublishError, timedOut bool) {
	batchCtx, done := r.batchContext(ctx)
	defer done()

	var publishErr error
	start := time.Now()
	n, err := r.store.Claim(batchCtx, r.cfg.BatchSize, func(ctx context.Context, msgs []runtime.OutboxMessage) ([]int64, error) {
		var ids []int64
		ids, failed = r.publish(ctx, msgs)
		res.Published = len(ids)
		publishErr = joinPublishErrors(failed)
		return ids, publishErr
	})
	res.Claimed, res.Duration, res.Err = n, time.Since(start), err
	if err == nil {
		failed = nil
	} else if publishErr != nil && !errors.Is(err, publishErr) {
		// The store failed on its own (the marking, say) after publish
		// failed: report its error rather than the publish failures.
		failed = nil
	}
	timedOut = err != nil && errors.Is(context.Cause(batchCtx), errShutdownTimeout)
	if r.cfg.OnBatch != nil && (n > 0 || err != nil) {
		r.cfg.OnBatch(res)
	}
	return res, failed, timedOut
}

// batchContext returns the context a batch runs with: ctx's values without its
// cancellation, cancelled [Config.ShutdownTimeout] after ctx is done. The
// returned function releases it.
func (r *Relay) batchContext(ctx context.Context) (context.Context, func()) {
	batchCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		// Cancelling after done has run is harmless, so the timer
		// needs no stopping.
		time.AfterFunc(r.cfg.ShutdownTimeout, func() { cancel(errShutdownTimeout) })
	})
	return batchCtx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// logFailure logs a failed claim once: one line per topic the publisher
// failed, or one line with the store's error.
func (r *Relay) logFailure(res BatchResult, failed []*PublishError, attempt int, wait time.Duration) {
	attrs := []any{attrAttempt, attempt}
	if wait > 0 {
		attrs = append(attrs, attrBackoff, wait)
	}
	if len(failed) == 0 {
		r.log.Warn("relay: claim failed",
			append([]any{attrError, res.Err, attrClaimed, res.Claimed}, attrs...)...)
		return
	}
	for _, f := range failed {
		r.log.Warn("relay: publish failed",
			append([]any{
				attrTopic, f.Topic,
				attrOutboxID, f.IDs[0],
				attrMessages, len(f.IDs),
				attrError, f.Err,
			}, attrs...)...)
	}
}

// listen calls Listen until ctx is done, backing off after each failure.
func (r *Relay) listen(ctx context.Context) {
	failures := 0
	for {
		var heard atomic.Bool
		err := r.notifier.Listen(ctx, func() {
			heard.Store(true)
			r.markRunning()
			r.Notify()
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errors.ErrUnsupported) {
			if r.pollDefaulted {
				r.poll.Store(int64(DefaultPollInterval))
				r.Notify() // re-arm the poll timer with the shorter interval
			}
			r.markRunning()
			r.log.Info("relay: store cannot notify, polling only",
				attrError, err,
				attrPollInterval, time.Duration(r.poll.Load()))
			return
		}
		r.markRunning() // do not hold Running back: polling covers for Listen
		if heard.Load() {
			failures = 0 // it was listening: the connection was lost
		}
		failures++
		wait := r.backoff(failures)
		r.log.Warn("relay: listen failed", attrError, err, attrAttempt, failures, attrBackoff, wait)
		if !sleep(ctx, wait) {
			return
		}
	}
}

// backoff returns how long to wait after the attempt-th consecutive failure: a
// random duration between half and all of min(MinBackoff*2^(attempt-1),
// MaxBackoff).
func (r *Relay) backoff(attempt int) time.Duration {
	d := r.cfg.MinBackoff
	for i := 1; i < attempt && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.cfg.MaxBackoff)
	if half := d / 2; half > 0 {
		d = half + rand.N(d-half+1)
	}
	return max(d, 1)
}

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
