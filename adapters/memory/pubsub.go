package memory

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Config configures [New]. Its zero value is ready to use.
type Config struct {
	// MaxMessagesPerTopic bounds how many messages one topic holds. A
	// Publish that would exceed it stores none of its messages and returns
	// an error wrapping [ErrTopicFull]; nothing is ever dropped. Messages are
	// kept for the life of the [PubSub] (later subscribers receive them
	// too), so a full topic stays full.
	//
	// Default: 0, no bound: memory grows with every message published.
	MaxMessagesPerTopic int

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [New] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

// setDefaults fills in the zero-value defaults. There are none to fill today;
// it keeps the shape of the other adapters' configs.
func (c *Config) setDefaults() {}

// Validate reports a setting out of range, wrapping [ErrInvalidConfig].
func (c Config) Validate() error {
	if c.MaxMessagesPerTopic < 0 {
		return fmt.Errorf("%w: MaxMessagesPerTopic %d is negative", ErrInvalidConfig, c.MaxMessagesPerTopic)
	}
	return nil
}

// PubSub is an in-process publisher and subscriber in one value (see the
// package documentation for its delivery rules). It is safe for concurrent
// use. Close it when done.
type PubSub struct {
	cfg    Config
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	topics  map[string]*topicLog
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup
}

// topicLog is the messages of one topic, in publish order.
type topicLog struct {
	msgs []*message.Message
	// grown is closed, and replaced, whenever msgs grows.
	grown chan struct{}
}

var (
	_ message.Publisher  = (*PubSub)(nil)
	_ message.Subscriber = (*PubSub)(nil)
)

// New returns a PubSub configured by cfg. It logs to cfg.Logger. It
// returns an error wrapping [ErrInvalidConfig] when cfg is invalid.
func New(cfg Config) (*PubSub, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	return &PubSub{
		cfg:     cfg,
		logger:  logger,
		topics:  map[string]*topicLog{},
		closing: make(chan struct{}),
	}, nil
}

// topicLocked returns topic's log, creating it. p.mu must be held.
func (p *PubSub) topicLocked(topic string) *topicLog {
	t, ok := p.topics[topic]
	if !ok {
		t = &topicLog{grown: make(chan struct{})}
		p.topics[topic] = t
	}
	return t
}

// Publish appends copies of msgs to topic's log, all or none, in the order
// given, and returns. Every current and future subscription to topic
// receives them, after every message published to topic before. Publish
// does not wait for subscribers; it never blocks on them.
//
// It returns an error wrapping [ErrTopicFull] when the messages would exceed
// [Config.MaxMessagesPerTopic], and [ErrClosed] after [PubSub.Close]; in
// both cases nothing is stored.
func (p *PubSub) Publish(topic string, msgs ...*message.Message) error {
	copies := make([]*message.Message, 0, len(msgs))
	for _, m := range msgs {
		if m == nil {
			continue
		}
		copies = append(copies, m.Copy())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	t := p.topicLocked(topic)
	if limit := p.cfg.MaxMessagesPerTopic; limit > 0 && len(t.msgs)+len(copies) > limit {
		return fmt.Errorf("%w: topic %q holds %d messages, %d more would exceed MaxMessagesPerTopic %d",
			ErrTopicFull, topic, len(t.msgs), len(copies), limit)
	}
	if len(copies) == 0 {
		return nil
	}
	t.msgs = append(t.msgs, copies...)
	close(t.grown)
	t.grown = make(chan struct{})
	return nil
}

// Subscribe returns a channel that receives every message of topic, from the
// first one ever published to it, in publish order, one at a time: the next
// message is sent after the current one is acked, and a nacked message is
// sent again. Each message's context is derived from ctx and canceled once
// the message is acked or nacked.
//
// The channel is closed when ctx is done or the PubSub is closed; a message
// not yet acked then is not lost: it stays in the topic, for other and later
// subscriptions.
func (p *PubSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	t := p.topicLocked(topic)
	out := make(chan *message.Message)
	p.subs.Add(1)
	go func() {
		defer p.subs.Done()
		defer close(out)
		p.deliver(ctx, topic, t, out)
	}()
	return out, nil
}

// deliver sends t's messages to out in order until ctx is done or p closes.
func (p *PubSub) deliver(ctx context.Context, topic string, t *topicLog, out chan<- *message.Message) {
	for next := 0; ; next++ {
		p.mu.Lock()
		for next >= len(t.msgs) {
			grown := t.grown
			p.mu.Unlock()
			select {
			case <-grown:
			case <-ctx.Done():
				return
			case <-p.closing:
				return
			}
			p.mu.Lock()
		}
		stored := t.msgs[next]
		p.mu.Unlock()

		for acked := false; !acked; {
			msg := stored.Copy()
			msgCtx, cancel := context.WithCancel(ctx)
			msg.SetContext(msgCtx)
			select {
			case out <- msg:
			case <-ctx.Done():
				cancel()
				return
			case <-p.closing:
				cancel()
				return
			}
			select {
			case <-msg.Acked():
				acked = true
			case <-msg.Nacked():
				p.logger.Trace("memory: message nacked, sending it again", watermill.LogFields{"topic": topic, "message_uuid": msg.UUID})
			case <-ctx.Done():
				cancel()
				return
			case <-p.closing:
				cancel()
				return
			}
			cancel()
		}
	}
}

// Close stops every subscription (their channels are closed) and makes
// Publish and Subscribe fail with [ErrClosed]. It waits until the
// subscriptions have stopped. It is idempotent.
func (p *PubSub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.closing)
	p.mu.Unlock()
	p.subs.Wait()
	return nil
}
