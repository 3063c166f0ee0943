package amqp

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Subscriber is a Watermill [message.Subscriber] for RabbitMQ: watermill-amqp's
// subscriber, configured by a [Config] so that it declares the same queues a
// [Publisher] with that Config declares, and consumes them in order. It is
// safe for concurrent use.
//
// Each subscription consumes its queue on its own channel with
// [Config.PrefetchCount] (default 1) and manual acknowledgement, and hands
// out one message at a time: the next only after the current one is acked or
// nacked. Ack acknowledges the delivery; Nack requeues it, and a classic
// queue delivers it again before the rest of the queue (with prefetch 1 and
// a single active consumer, the defaults; a quorum queue delivers it after
// later messages, see [Config.Quorum]). Delivery is at least once: a
// message being handled when the connection drops is delivered again, with
// the same UUID and the _watermill_amqp_redelivered metadata set to "true".
type Subscriber struct {
	sub *wamqp.Subscriber

	mu     sync.Mutex
	closed bool
}

var _ message.SubscribeInitializer = (*Subscriber)(nil)

// NewSubscriber connects to the broker and returns a Subscriber configured
// by cfg; in [ModePubSub], cfg.Group names its consumer group and is
// required. It logs to cfg.Logger. The error wraps
// [ErrInvalidConfig] when cfg is invalid; otherwise it is watermill-amqp's
// connection error.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Mode == ModePubSub && cfg.Group == "":
		return nil, fmt.Errorf("%w: ModePubSub needs a Group (the queue suffix of this subscriber's consumer group)", ErrInvalidConfig)
	case cfg.Mode == ModeQueue && cfg.Group != "":
		return nil, fmt.Errorf("%w: Group %q in ModeQueue: a topic has one queue, shared by every subscriber; use ModePubSub for groups", ErrInvalidConfig, cfg.Group)
	case cfg.Mode == ModePubSub:
		if err := validateGroup(cfg.Group); err != nil {
			return nil, fmt.Errorf("%w: Group: %w", ErrInvalidConfig, err)
		}
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	sub, err := wamqp.NewSubscriber(cfg.WatermillConfig(cfg.Group), logger.With(watermill.LogFields{"component": "amqp_subscriber"}))
	if err != nil {
		return nil, fmt.Errorf("amqp: new subscriber: %w", err)
	}
	return &Subscriber{sub: sub}, nil
}

// Subscribe declares topic's queue (and, in [ModePubSub], the topic's
// exchange and the binding) and returns a channel of its messages, closed
// when ctx is done or the Subscriber is closed. Ack or Nack every message.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, ErrSubscriberClosed
	}
	ch, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("amqp: subscribe to topic %q: %w", topic, err)
	}
	return ch, nil
}

// SubscribeInitialize declares topic's queue, exchange and binding as
// Subscribe does, without consuming. In [ModePubSub], a group must do this
// (or Subscribe) before the messages it must see are published, unless the
// publisher's [Config.Groups] lists it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.isClosed() {
		return ErrSubscriberClosed
	}
	if err := s.sub.SubscribeInitialize(topic); err != nil {
		return fmt.Errorf("amqp: initialize topic %q: %w", topic, err)
	}
	return nil
}

// Close closes every subscription (their channels close; a message not yet
// acked is requeued by the broker) and the connection. It is safe to call
// more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := s.sub.Close(); err != nil {
		return fmt.Errorf("amqp: close subscriber: %w", err)
	}
	return nil
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
