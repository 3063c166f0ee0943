package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/internal/backoff"
)

// SubscriberConfig configures a [Subscriber].
type SubscriberConfig struct {
	// Client accepts the sessions. Required.
	Client Client

	// Subscription is the topic's subscription the subscriber reads: the
	// consumer group. Empty, the Watermill topic names a queue.
	Subscription string

	// MaxSessions is how many sessions (aggregates) the subscriber holds
	// at once, each delivering its messages in order.
	//
	// Default: 8.
	MaxSessions int

	// ReceiveBatch is how many messages one receive asks a session for.
	//
	// Default: 32.
	ReceiveBatch int

	// SessionIdle is how long a session with no message stays locked to
	// this subscriber before it is released for the next one.
	//
	// Default: 1s.
	SessionIdle time.Duration

	// NackResendSleep is how long a session waits after a nack before it
	// delivers the nacked message again (from memory: the session's lock
	// is kept and renewed, and the message's delivery count is not
	// raised, so a handler failing for a while does not walk it into the
	// entity's dead-letter queue).
	//
	// Default: 100ms.
	NackResendSleep time.Duration

	// Logger receives the failures it retries.
	//
	// Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports a setting out of range, wrapping [ErrInvalidConfig].
func (c SubscriberConfig) Validate() error {
	switch {
	case c.Client == nil:
		return fmt.Errorf("%w: Client is required", ErrInvalidConfig)
	case c.MaxSessions < 0, c.ReceiveBatch < 0, c.SessionIdle < 0, c.NackResendSleep < 0:
		return fmt.Errorf("%w: MaxSessions, ReceiveBatch, SessionIdle and NackResendSleep must not be negative", ErrInvalidConfig)
	}
	return nil
}

// Subscriber receives from session-enabled queues and subscriptions: it
// accepts up to MaxSessions sessions at a time and delivers each session's
// messages in order, one at a time, renewing each session's lock while it
// holds it; a message is completed when it is acked, and a nacked one is
// delivered again after NackResendSleep, before the session's later
// messages, without giving the session up. When the subscription ends,
// the messages received and not completed are abandoned, in order, for
// the session's next holder. It is safe for concurrent use.
type Subscriber struct {
	cfg SubscriberConfig
	log *slog.Logger

	mu      sync.Mutex
	closed  bool
	closing context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewSubscriber returns a Subscriber for cfg.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 8
	}
	if cfg.ReceiveBatch == 0 {
		cfg.ReceiveBatch = 32
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = time.Second
	}
	if cfg.NackResendSleep == 0 {
		cfg.NackResendSleep = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Subscriber{cfg: cfg, log: cfg.Logger.With("component", "servicebus_subscriber", "subscription", cfg.Subscription)}
	s.closing, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Subscribe delivers the messages of the queue (or, with Subscription, of
// the topic's subscription) named topic until ctx is done or Close.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSubscriberClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for range s.cfg.MaxSessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.acceptLoop(ctx, topic, out)
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wg.Wait()
		stop()
		cancel()
		close(out)
	}()
	return out, nil
}

// acceptLoop accepts sessions one after the other and serves each.
func (s *Subscriber) acceptLoop(ctx context.Context, topic string, out chan<- *message.Message) {
	failures := 0
	for ctx.Err() == nil {
		r, err := s.cfg.Client.AcceptNextSession(ctx, topic, s.cfg.Subscription)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if code(err) == azservicebus.CodeTimeout {
				failures = 0 // no session has messages
				continue
			}
			failures++
			wait := min(100*time.Millisecond<<min(failures-1, 6), 5*time.Second)
			s.log.Warn("servicebus: accepting a session failed; trying again", "entity", topic, "error", err, "backoff", wait)
			if !backoff.Sleep(ctx, wait) {
				return
			}
			continue
		}
		failures = 0
		s.serve(ctx, topic, r, out)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = r.Close(closeCtx)
		cancel()
	}
}

// serve delivers one session's messages in order until it is idle for
// SessionIdle, a settle or a lock renewal fails, or ctx ends.
func (s *Subscriber) serve(ctx context.Context, topic string, r SessionReceiver, out chan<- *message.Message) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		s.renewLock(ctx, cancel, topic, r)
	}()
	defer func() { cancel(); <-renewed }()
	abandon := func(msgs []*azservicebus.ReceivedMessage) {
		for _, m := range msgs {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_ = r.AbandonMessage(actx, m, nil)
			cancel()
		}
	}
	for ctx.Err() == nil {
		rctx, rcancel := context.WithTimeout(ctx, s.cfg.SessionIdle)
		msgs, err := r.ReceiveMessages(rctx, s.cfg.ReceiveBatch, nil)
		rcancel()
		if len(msgs) == 0 {
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("servicebus: receiving from a session failed; releasing it", "entity", topic, "session", r.SessionID(), "error", err)
			}
			return // idle, or failed: release the session
		}
		for i, rm := range msgs {
			for {
				acked, err := s.deliver(ctx, rm, out)
				if err != nil {
					abandon(msgs[i:]) // for the session's next holder, in order
					return
				}
				if acked {
					break
				}
				if !backoff.Sleep(ctx, s.cfg.NackResendSleep) {
					abandon(msgs[i:])
					return
				}
			}
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := r.CompleteMessage(cctx, rm, nil)
			ccancel()
			if err != nil {
				// The lock was lost (another receiver has the session now,
				// or will): the message is delivered again there.
				s.log.Warn("servicebus: completing a message failed; it is delivered again", "entity", topic, "session", r.SessionID(), "message_id", rm.MessageID, "error", err)
				abandon(msgs[i+1:])
				return
			}
		}
	}
}

// renewLock renews the session's lock at half its remaining time (every
// 10s when the receiver does not say) until ctx ends; a failed renewal
// ends the session (cancel): another receiver may hold it once the lock
// lapses, and must not see this one deliver beside it.
func (s *Subscriber) renewLock(ctx context.Context, cancel context.CancelFunc, topic string, r SessionReceiver) {
	for {
		wait := 10 * time.Second
		if until := r.LockedUntil(); !until.IsZero() {
			wait = max(time.Until(until)/2, 100*time.Millisecond)
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.RenewSessionLock(rctx, nil)
		rcancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("servicebus: renewing a session's lock failed; releasing the session", "entity", topic, "session", r.SessionID(), "error", err)
			cancel()
			return
		}
	}
}

// deliver hands a message to the subscription's reader and waits for its
// ack (true) or nack (false); an error when ctx ends first.
func (s *Subscriber) deliver(ctx context.Context, rm *azservicebus.ReceivedMessage, out chan<- *message.Message) (bool, error) {
	m := message.NewMessage(rm.MessageID, rm.Body)
	for k, v := range rm.ApplicationProperties {
		if str, ok := v.(string); ok {
			m.Metadata.Set(k, str)
		} else {
			m.Metadata.Set(k, fmt.Sprint(v))
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.SetContext(mctx)
	select {
	case out <- m:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case <-m.Acked():
		return true, nil
	case <-m.Nacked():
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Close ends every subscription and waits for their sessions to be
// released.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}
