package sql

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	watermillsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// SubscriberConfig configures [NewSubscriber]. Its zero value is ready to
// use.
type SubscriberConfig struct {
	// ConsumerGroup names the group the subscriber reads in: every group
	// receives every message of a topic, from the topic's first message on
	// for a group that has not read it before; the subscribers of one group
	// take turns and share the messages.
	//
	// Default: "", a group like any other.
	ConsumerGroup string

	// PollInterval is how long a subscription waits before asking the
	// database again after it found no new message.
	//
	// Default: 100ms.
	PollInterval time.Duration

	// RetryInterval is how long a subscription waits before asking the
	// database again after an error (the connection was lost, say).
	//
	// Default: 1s.
	RetryInterval time.Duration

	// ResendInterval is how long a subscription waits before delivering a
	// nacked message again.
	//
	// Default: 1s.
	ResendInterval time.Duration

	// AckDeadline is how long a delivered message may stay unacked before
	// it is taken back and delivered again. A message held holds back its
	// own group on its own topic only (the group's subscribers take turns on
	// the group's offsets row); other groups and topics go on.
	//
	// Default: 30s.
	AckDeadline time.Duration

	// BatchSize is how many messages one query reads. The group's offset is
	// committed after each batch, so up to this many acked messages are
	// delivered again after a crash.
	//
	// Default: 100.
	BatchSize int

	// SkipSchemaInitialization stops Subscribe from creating the topic's
	// tables (see [PublisherConfig.SkipSchemaInitialization]).
	//
	// Default: false, the tables are created on first use.
	SkipSchemaInitialization bool

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewSubscriber] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = time.Second
	}
	if c.ResendInterval == 0 {
		c.ResendInterval = time.Second
	}
	if c.AckDeadline == 0 {
		c.AckDeadline = 30 * time.Second
	}
	if c.BatchSize == 0 {
		c.BatchSize = 100
	}
}

// Validate reports a missing or out-of-range setting, wrapping
// [ErrInvalidConfig]. Zero values are valid: they stand for the defaults.
func (c SubscriberConfig) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"PollInterval", c.PollInterval},
		{"RetryInterval", c.RetryInterval},
		{"ResendInterval", c.ResendInterval},
		{"AckDeadline", c.AckDeadline},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %s is negative", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.BatchSize < 0 {
		return fmt.Errorf("%w: BatchSize %d is negative", ErrInvalidConfig, c.BatchSize)
	}
	if len(c.ConsumerGroup) > 255 {
		return fmt.Errorf("%w: ConsumerGroup is %d bytes, longer than 255", ErrInvalidConfig, len(c.ConsumerGroup))
	}
	return nil
}

// Subscriber reads topics from PostgreSQL tables in one consumer group (see
// the package documentation). It is safe for concurrent use. Close it when
// done; it does not close the *sql.DB.
type Subscriber struct {
	sub    *watermillsql.Subscriber
	db     *sql.DB
	create bool

	// Each subscription's messages pass through a goroutine of ours, so
	// that Close returns only after every subscription channel is closed.
	// (watermill-sql's Close returns when its reading loop has ended, just
	// before it closes the channel.)
	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	forward sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber reading through db, which must be a
// PostgreSQL database (another database's driver is refused with an error
// wrapping [ErrNotPostgres]). It logs to cfg.Logger.
func NewSubscriber(db *sql.DB, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkDriver(db); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	ackDeadline := cfg.AckDeadline
	sub, err := watermillsql.NewSubscriber(watermillsql.BeginnerFromStdSQL(db), watermillsql.SubscriberConfig{
		ConsumerGroup:    cfg.ConsumerGroup,
		AckDeadline:      &ackDeadline,
		PollInterval:     cfg.PollInterval,
		ResendInterval:   cfg.ResendInterval,
		RetryInterval:    cfg.RetryInterval,
		SchemaAdapter:    subscriberSchema{batch: cfg.BatchSize},
		OffsetsAdapter:   subscriberOffsets{},
		InitializeSchema: false, // initialize does it, and checks the layout
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("sql: new subscriber: %w", err)
	}
	return &Subscriber{sub: sub, db: db, create: !cfg.SkipSchemaInitialization, closing: make(chan struct{})}, nil
}

// Subscribe returns a channel of topic's messages for the subscriber's
// consumer group, in order, one at a time (see the package documentation).
// It creates the topic's tables unless
// [SubscriberConfig.SkipSchemaInitialization], and refuses tables of
// watermill-sql's default layout ([ErrLegacySchema]). The channel is closed
// when ctx is done or the Subscriber is closed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	// Before taking mu: the tables' advisory lock may be held for long (an
	// Upgrade), and Close must not wait for it.
	if err := initialize(ctx, s.db, tablesOf(topic), s.create); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSubscriberClosed
	}
	in, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("sql: subscribe to %s: %w", topic, err)
	}
	out := make(chan *message.Message)
	s.forward.Add(1)
	go func() {
		defer s.forward.Done()
		defer close(out)
		for {
			select {
			case msg, ok := <-in:
				if !ok {
					return
				}
				// A message not handed on is never acked: watermill-sql
				// delivers it again.
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				case <-s.closing:
					return
				}
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
		}
	}()
	return out, nil
}

// SubscribeInitialize creates topic's tables (messages, offset counter and
// group offsets) if they do not exist, whatever
// [SubscriberConfig.SkipSchemaInitialization] says, and refuses tables of
// watermill-sql's default layout ([ErrLegacySchema]).
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return initialize(ctx, s.db, tablesOf(topic), true)
}

// Close stops every subscription and returns once their channels are
// closed. It does not close the *sql.DB. It is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	err := s.sub.Close()
	s.forward.Wait()
	if err != nil {
		return fmt.Errorf("sql: close subscriber: %w", err)
	}
	return nil
}
