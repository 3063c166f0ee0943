package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/internal/backoff"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/internal/logattr"
)

// Log attribute keys, defined once so every log line uses the same names.
const (
	attrTopic           = "topic"
	attrOutboxID        = "outbox_id"
	attrEventID         = "event_id"
	attrEventType       = "event_type"
	attrMessages        = "messages"
	attrAttempt         = "attempt"
	attrBackoff         = "backoff"
	attrClaimed         = "claimed"
	attrPublished       = "published"
	attrDuration        = "duration"
	attrBatchSize       = "batch_size"
	attrPollInterval    = "poll_interval"
	attrNotifier        = "notifier"
	attrShards          = "shards"
	attrWas             = "was"
	attrShutdownTimeout = "shutdown_timeout"
	attrPermanent       = "permanent"
	attrOwner           = "owner"
	attrFor             = "for"
	attrStandAside      = "stand_aside"
)

// Relay moves messages from a [Store] to a Watermill message.Publisher:
// it claims a batch, publishes it, lets the store mark what was published, and
// repeats. Create one with [New] and start it with [Relay.Run].
//
// A Relay is safe for concurrent use: [Relay.Notify] and [Relay.Running] may
// be called from any goroutine.
type Relay struct {
	store    Store
	notifier Notifier      // the store as a Notifier, or nil
	waker    WakeRequester // the store as a WakeRequester (and a Notifier), or nil
	// handOverer is the store as a HandOverer, or nil (hand-overs are off
	// when HandOverAfter is negative too).
	handOverer HandOverer
	pub        message.Publisher
	cfg        Config
	log        *slog.Logger

	// poll is the poll interval in force, a time.Duration. It starts at
	// cfg.PollInterval and drops to DefaultPollInterval when the store
	// turns out unable to notify and PollInterval was left at its default.
	poll          atomic.Int64
	pollDefaulted bool
	// notifying is set while the store's notifications may wake the
	// relay: it has a Notifier whose Listen has not reported
	// errors.ErrUnsupported.
	notifying atomic.Bool

	wake        chan struct{} // capacity 1: a pending wake-up
	running     chan struct{} // closed by markRunning
	runningOnce sync.Once
	active      atomic.Bool // a Run call is in progress
	// progress is the end of Run's last round that did not fail as a
	// whole, in Unix nanoseconds (0: none yet); see LastProgress.
	progress atomic.Int64
	// held is how many shards Run's owner held at its last claim, -1 when
	// not running or the store does not say; see ShardsHeld.
	held atomic.Int64

	since func(time.Time) time.Duration // tests only: time.Since
}

// New returns a relay that claims messages from store and publishes them with
// pub. It applies the defaults documented on [Config] and returns an error
// wrapping [ErrInvalidConfig] when cfg is invalid (see [Config.Validate]) or
// store or pub is nil.
//
// If store also implements [Notifier], [Relay.Run] listens for its
// notifications and polls less often (see [Config.PollInterval]).
//
// The relay never closes pub; the caller does, after Run has returned.
func New(store Store, pub message.Publisher, cfg Config) (*Relay, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: nil publisher", ErrInvalidConfig)
	}
	notifier, _ := store.(Notifier)
	if c, ok := store.(NotifyChecker); ok && !c.CanNotify() {
		notifier = nil
	}
	pollDefaulted := cfg.PollInterval == 0
	cfg.setDefaults(notifier != nil)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CloudEvents != nil {
		ce := *cfg.CloudEvents // the caller may change its copy later
		cfg.CloudEvents = &ce
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
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
	r.held.Store(-1)
	if h, ok := store.(HandOverer); ok && cfg.HandOverAfter > 0 {
		r.handOverer = h
	}
	if notifier != nil {
		r.waker, _ = store.(WakeRequester)
		r.notifying.Store(true)
	}
	return r, nil
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
// call is listening (or has failed: polling covers for it), or the first
// claim said the store hands the relay nothing yet (a standby: see
// [Batch.ClaimAgainIn]). It stays closed after Run returns.
func (r *Relay) Running() <-chan struct{} {
	return r.running
}

// ShardsHeld returns how many of the outbox's shards the running relay
// held at its last claim, when its store divides the outbox among relays
// (sqlstore.Store: 0 for a relay standing by, all of them for the active
// one by default), and -1 when the relay is not running or its store does
// not say. adapters/metrics exports it as outbox_relay_shards_held, so that
// an operator can tell which relay publishes.
func (r *Relay) ShardsHeld() int { return int(r.held.Load()) }

// LastProgress returns when [Relay.Run] last ended a round that did not
// fail as a whole: a claim that found nothing to do, or a batch the store
// claimed and marked of which at least one message was published or whose
// failures were all the messages' own (rejected for good, parked). It is
// the zero time before the first such round. A running relay that is not
// stuck makes progress at least once per [Config.PollInterval] when idle
// and once per batch when busy, so a LastProgress older than PollInterval
// plus [Config.PublishTimeout] and twice [Config.StoreTimeout] means the
// relay is not running, or it cannot reach its store, or every message it
// claims fails to publish (it backs off and retries meanwhile). A store
// holds a failed message back until its retry time, and claims that find
// nothing else to do meanwhile count as progress: a lasting broker outage
// shows in the age of the oldest pending message ([Stats]), not here.
// Health checks (runtime/health) use it.
// It is safe to call from any goroutine.
func (r *Relay) LastProgress() time.Time {
	n := r.progress.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (r *Relay) markRunning() {
	r.runningOnce.Do(func() { close(r.running) })
}

// logFailure logs a failed batch: the store's error, or one line per
// distinct error naming the first message that failed with it (its outbox
// id, topic, event id and type, found among res.Messages).
func (r *Relay) logFailure(res BatchResult, attempt int, wait time.Duration) {
	attrs := []any{attrAttempt, attempt}
	if wait > 0 {
		attrs = append(attrs, attrBackoff, wait)
	}
	if res.Err != nil {
		r.log.Warn("relay: batch failed",
			append([]any{errAttr(res.Err), attrClaimed, res.Claimed, attrPublished, res.Published}, attrs...)...)
		return
	}
	// One line per distinct error, the message's own id left out: an
	// adapter that names each message in its error ("publish message <id>
	// ...: EOF") failing a whole batch is one failure, not five lines.
	seen := map[string]bool{}
	for _, f := range res.Failures {
		if errors.Is(f.Err, errEarlierFailed) {
			continue
		}
		var m runtime.OutboxMessage
		for _, c := range res.Messages {
			if c.ID == f.ID {
				m = c
				break
			}
		}
		k := f.Err.Error()
		if m.EventID != (uuid.UUID{}) {
			k = strings.ReplaceAll(k, m.EventID.String(), "")
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		r.log.Warn("relay: publish failed",
			append([]any{
				attrOutboxID, f.ID,
				attrTopic, m.Topic,
				attrEventID, m.EventID.String(),
				attrEventType, m.EventType,
				attrMessages, res.Failed,
				attrPublished, res.Published,
				attrPermanent, f.Permanent,
				errAttr(f.Err),
			}, attrs...)...)
		if len(seen) >= 5 {
			break
		}
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
			r.notifying.Store(false)
			if r.pollDefaulted {
				r.poll.Store(int64(DefaultPollInterval))
				r.Notify() // re-arm the poll timer with the shorter interval
			}
			r.markRunning()
			r.log.Info("relay: store cannot notify, polling only",
				errAttr(err),
				attrPollInterval, time.Duration(r.poll.Load()))
			return
		}
		r.markRunning() // do not hold Running back: polling covers for Listen
		if heard.Load() {
			failures = 0 // it was listening: the connection was lost
		}
		failures++
		wait := r.backoff(failures)
		r.log.Warn("relay: listen failed", errAttr(err), attrAttempt, failures, attrBackoff, wait)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// backoff returns how long to wait after the attempt-th consecutive failure: a
// random duration between half and all of min(MinBackoff*2^(attempt-1),
// MaxBackoff).
func (r *Relay) backoff(attempt int) time.Duration {
	return max(backoff.Jitter(backoff.Exponential(r.cfg.MinBackoff, r.cfg.MaxBackoff, attempt)), 1)
}

// errAttr is the log attribute of an error: its message on one line (see
// logattr.Error).
func errAttr(err error) slog.Attr { return logattr.Error(err) }
