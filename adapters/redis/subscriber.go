package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"
)

// SubscriberConfig configures a [Subscriber]. ConsumerGroup is required;
// every other zero value means the documented default.
type SubscriberConfig struct {
	// URL is the server URL, as for [PublisherConfig.URL].
	//
	// Default: [DefaultURL]. Ignored when Client is set.
	URL string

	// Client, if set, is the client to consume with. The Subscriber does not
	// close it.
	//
	// Default: nil (NewSubscriber creates a client for URL and Close closes
	// it).
	Client goredis.UniversalClient

	// ConsumerGroup is the Redis consumer group. It is created, at the
	// beginning of the stream (id 0), on first subscription; every group
	// gets every entry, and the subscribers of a group share them.
	// Required.
	ConsumerGroup string

	// Consumer is this subscriber's consumer name within the group.
	// Redis keeps every consumer a group has had, so the subscriber
	// deletes its own at Close when it holds no pending entry, and a
	// subscription that takes the group over (SharedGroup unset) deletes
	// the consumers that hold none and have been idle for an hour: a
	// random name per process does not pile up in the group.
	//
	// Default: a random name per Subscriber.
	Consumer string

	// BlockTime is how long one XREADGROUP waits for an entry.
	//
	// Default: 100ms.
	BlockTime time.Duration

	// ClaimInterval is how often the subscriber looks for entries that
	// another consumer of the group read and has not acked for MaxIdleTime
	// (a dead consumer's), and claims them.
	//
	// Default: 5s.
	ClaimInterval time.Duration

	// MaxIdleTime is how long an entry must stay unacked before another
	// consumer claims it. Keep it above the longest time a handler takes:
	// an entry claimed while its handler still runs is handled twice.
	//
	// Default: 60s.
	MaxIdleTime time.Duration

	// NackResendSleep is how long the subscriber waits before it hands a
	// nacked message out again (to the same channel: Redis does not
	// redeliver by itself).
	//
	// Default: 0, at once.
	NackResendSleep time.Duration

	// SharedGroup says that several subscribers read the group at once
	// (each then gets some of its entries, with no order across them).
	// When false, a subscription starts by taking over every entry
	// pending in the group, read by a consumer that stopped (a crash, a
	// kill) before acking it, and hands those out, in stream order,
	// before any entry not read yet: a group read by one subscriber at a
	// time keeps each aggregate's order across a restart. (An entry that
	// another subscriber is still handling, in a rolling restart say, is
	// then handled twice; the inbox applies it once.) Set it when
	// subscribers share the group: a starting one then leaves the entries
	// the others hold to them, and a stopped one's entries are claimed
	// once idle for MaxIdleTime, as by every subscriber.
	//
	// Default: false.
	SharedGroup bool

	// OverwriteConfig, if set, is called with the watermill-redisstream
	// subscriber config after the defaults are set, to set what this struct
	// does not expose (ShouldClaimPendingMessage, ConsumerTimeout, the
	// unmarshaller). Client, ConsumerGroup and OldestId are set again after
	// it runs.
	//
	// Default: nil (no change).
	OverwriteConfig func(*redisstream.SubscriberConfig)

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewSubscriber] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Consumer == "" {
		c.Consumer = watermill.NewShortUUID()
	}
	if c.BlockTime == 0 {
		c.BlockTime = redisstream.DefaultBlockTime
	}
	if c.ClaimInterval == 0 {
		c.ClaimInterval = redisstream.DefaultClaimInterval
	}
	if c.MaxIdleTime == 0 {
		c.MaxIdleTime = redisstream.DefaultMaxIdleTime
	}
}

// Validate reports whether c is usable. A zero value other than
// ConsumerGroup is valid, since it means the default. The error wraps
// [ErrInvalidConfig].
func (c SubscriberConfig) Validate() error {
	switch {
	case strings.TrimSpace(c.ConsumerGroup) == "":
		return fmt.Errorf("%w: no ConsumerGroup", ErrInvalidConfig)
	case c.BlockTime < 0:
		return fmt.Errorf("%w: negative BlockTime %s", ErrInvalidConfig, c.BlockTime)
	case c.ClaimInterval < 0:
		return fmt.Errorf("%w: negative ClaimInterval %s", ErrInvalidConfig, c.ClaimInterval)
	case c.MaxIdleTime < 0:
		return fmt.Errorf("%w: negative MaxIdleTime %s", ErrInvalidConfig, c.MaxIdleTime)
	case c.NackResendSleep < 0:
		return fmt.Errorf("%w: negative NackResendSleep %s", ErrInvalidConfig, c.NackResendSleep)
	}
	return nil
}

// Subscriber is a Watermill [message.Subscriber] that reads Redis streams in
// a consumer group: watermill-redisstream's subscriber, configured to start
// new groups at the beginning of the stream and to claim the entries of
// dead consumers. It is safe for concurrent use.
//
// Each subscription hands out one message at a time, in stream order, and
// reads the next entry only after the current one is acked (XACK) or
// nacked; a nacked message is handed out again at once (or after
// NackResendSleep), before anything after it. So a group with one
// subscriber handles each aggregate's messages in order. Redis spreads a
// group's entries over its consumers with no regard to keys, so with
// several subscribers in one group there is no order across them.
//
// Delivery is at least once. An entry handed out and not acked when its
// subscription ends (Close, a crash) stays pending in the group. The next
// subscription of the group takes it over when it starts, and hands it out
// (with any other pending entry, in stream order) before anything newer,
// so that a group read by one subscriber at a time keeps each aggregate's
// order across a stop. With [SubscriberConfig.SharedGroup] (subscribers
// sharing the group at once) a starting subscription leaves pending
// entries alone; any subscriber of the group claims an entry once it has
// been idle for [SubscriberConfig.MaxIdleTime], and hands it out then.
type Subscriber struct {
	*redisstream.Subscriber
	cfg          SubscriberConfig
	client       goredis.UniversalClient
	ownClient    bool
	logger       watermill.LoggerAdapter
	unmarshaller redisstream.Unmarshaller
	// closingCtx is cancelled by Close; wg counts the subscriptions'
	// goroutines of Subscribe.
	closingCtx context.Context
	closeCtx   context.CancelFunc
	wg         sync.WaitGroup
	innerMu    sync.Mutex // serializes the inner Subscribe and Close
	closeOnce  sync.Once
	// topics are the streams subscribed to, whose consumer Close deletes.
	topicsMu sync.Mutex
	topics   map[string]bool
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber configured by cfg. It logs to
// cfg.Logger. The error wraps [ErrInvalidConfig] when cfg is invalid.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	client, owned, err := newClient(cfg.Client, cfg.URL)
	if err != nil {
		return nil, err
	}
	rc := redisstream.SubscriberConfig{
		Consumer:        cfg.Consumer,
		BlockTime:       cfg.BlockTime,
		ClaimInterval:   cfg.ClaimInterval,
		MaxIdleTime:     cfg.MaxIdleTime,
		NackResendSleep: cfg.NackResendSleep,
		// Without it, the first XREADGROUP blocks until an entry comes,
		// and a subscription of an idle stream outlives its Close.
		DisableIndefiniteInitialBlock: true,
	}
	if rc.NackResendSleep == 0 {
		rc.NackResendSleep = redisstream.NoSleep
	}
	if cfg.OverwriteConfig != nil {
		cfg.OverwriteConfig(&rc)
	}
	rc.Client = unclosable{client}
	rc.ConsumerGroup = cfg.ConsumerGroup
	rc.OldestId = "0"
	sub, err := redisstream.NewSubscriber(rc, logger.With(watermill.LogFields{"component": "redis_subscriber"}))
	if err != nil {
		if owned {
			_ = client.Close()
		}
		return nil, fmt.Errorf("redis: %w", err)
	}
	closingCtx, closeCtx := context.WithCancel(context.Background())
	return &Subscriber{Subscriber: sub, cfg: cfg, client: client, ownClient: owned,
		logger:       logger.With(watermill.LogFields{"component": "redis_subscriber"}),
		unmarshaller: unmarshallerOf(rc), closingCtx: closingCtx, closeCtx: closeCtx}, nil
}

// SubscribeInitialize creates the stream (empty) and the consumer group at
// the beginning of the stream, if they do not exist.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.client.XGroupCreateMkStream(ctx, topic, s.cfg.ConsumerGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redis: create group %q on stream %q: %w", s.cfg.ConsumerGroup, topic, err)
	}
	return nil
}

// Close ends every subscription, waits for them, and closes the client if
// the Subscriber created it. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.closeCtx()
	s.innerMu.Lock()
	err := s.Subscriber.Close()
	s.innerMu.Unlock()
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("redis: close subscriber: %w", err)
	}
	s.closeOnce.Do(func() {
		s.forgetSelf()
		if s.ownClient {
			if cerr := s.client.Close(); cerr != nil {
				err = fmt.Errorf("redis: close client: %w", cerr)
			}
		}
	})
	return err
}
