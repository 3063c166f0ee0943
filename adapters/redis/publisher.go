package redis

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
	"github.com/gooutbox/outbox/runtime"
)

// PublisherConfig configures a [Publisher]. Every zero value means the
// documented default.
//
// # Trimming
//
// A Redis stream keeps every entry until it is trimmed, whether or not the
// consumer groups have read it; Redis does not know which entries are still
// needed. Trimming by length (XADD MAXLEN ~ N) or by age (XADD MINID ~ t)
// deletes the oldest entries even when a slow or stopped group has not
// read them yet: those events are silently lost for that group, and a new
// group no longer sees them. So the default is not to trim. Opt in with
// [PublisherConfig.MaxLen] or [PublisherConfig.MaxAge], sized so that every
// group always reads an entry before it goes (MaxAge is easier to reason
// about: "a group may fall behind by at most this long"), or trim outside
// the publisher (XTRIM MINID with the oldest last-delivered id of all
// groups, from XINFO GROUPS). Trimming is approximate ("~"): Redis removes
// whole internal nodes, so a stream keeps at least MaxLen entries, or every
// entry younger than MaxAge, and a few more.
type PublisherConfig struct {
	// URL is the server URL (redis://[user:password@]host:port/db, or
	// rediss:// for TLS), as go-redis's ParseURL takes it.
	//
	// Default: [DefaultURL]. Ignored when Client is set.
	URL string

	// Client, if set, is the client to publish with. The Publisher does not
	// close it.
	//
	// Default: nil (NewPublisher creates a client for URL and Close closes
	// it).
	Client goredis.UniversalClient

	// MaxLen, if positive, trims each stream to about this many entries on
	// every publish (XADD MAXLEN ~). See Trimming: entries a group has not
	// read yet are deleted too.
	//
	// Default: 0, no trimming.
	MaxLen int64

	// MaxAge, if positive, trims each stream of the entries older than this
	// on every publish (XADD MINID ~, from the entry ids' millisecond
	// timestamps and the publisher's clock). See Trimming. It cannot be set
	// with MaxLen.
	//
	// Default: 0, no trimming.
	MaxAge time.Duration

	// MaxMessageBytes is the largest encoded message (payload plus encoded
	// metadata) the publisher sends. A larger one fails permanently
	// ([ErrMessageTooLarge]) before anything is sent. Redis refuses a
	// single value above proto-max-bulk-len (512 MiB by default) and
	// closes the connection, so keep this at or below it; a lower value
	// keeps huge messages out of memory.
	//
	// Default: 512 MiB (536870912).
	MaxMessageBytes int

	// PublishTimeout bounds one Publish call. A message without a reply by
	// then fails (retryably; it may have been added, and its republish is
	// then a duplicate).
	//
	// Default: 10s.
	PublishTimeout time.Duration

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewPublisher] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *PublisherConfig) setDefaults() {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 512 << 20
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
}

// Validate reports whether c is usable; zero values are valid, since they
// mean the default. The error wraps [ErrInvalidConfig].
func (c PublisherConfig) Validate() error {
	switch {
	case c.MaxLen < 0:
		return fmt.Errorf("%w: negative MaxLen %d", ErrInvalidConfig, c.MaxLen)
	case c.MaxAge < 0:
		return fmt.Errorf("%w: negative MaxAge %s", ErrInvalidConfig, c.MaxAge)
	case c.MaxLen > 0 && c.MaxAge > 0:
		return fmt.Errorf("%w: MaxLen and MaxAge are both set; XADD trims by one of them", ErrInvalidConfig)
	case c.MaxAge > 0 && c.MaxAge < time.Millisecond:
		return fmt.Errorf("%w: MaxAge %s is below 1ms, the resolution of stream ids", ErrInvalidConfig, c.MaxAge)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("%w: negative MaxMessageBytes %d", ErrInvalidConfig, c.MaxMessageBytes)
	case c.PublishTimeout < 0:
		return fmt.Errorf("%w: negative PublishTimeout %s", ErrInvalidConfig, c.PublishTimeout)
	}
	return nil
}

// Publisher is a Watermill [message.Publisher] that adds messages to Redis
// streams, one stream (key) per topic, in the wire format of
// watermill-redisstream, so its subscriber and this package's [Subscriber]
// read them. It is safe for concurrent use.
type Publisher struct {
	cfg       PublisherConfig
	client    goredis.UniversalClient
	ownClient bool
	marshaler redisstream.Marshaller
	logger    watermill.LoggerAdapter
	now       func() time.Time

	mu     sync.RWMutex
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher configured by cfg. It logs to cfg.Logger.
// It does not contact the server. The error wraps [ErrInvalidConfig] when
// cfg is invalid.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	client, owned, err := newClient(cfg.Client, cfg.URL)
	if err != nil {
		return nil, err
	}
	return &Publisher{
		cfg:       cfg,
		client:    client,
		ownClient: owned,
		marshaler: redisstream.DefaultMarshallerUnmarshaller{},
		logger:    logger.With(watermill.LogFields{"component": "redis_publisher"}),
		now:       time.Now,
	}, nil
}

// Publish adds msgs to the stream named topic with one XADD each, all sent
// in one pipeline (one round trip), in order, and returns nil only when
// Redis has replied to every XADD with an entry id. Redis executes one
// connection's commands in order, so the stream holds the messages in the
// order given.
//
// Redis acknowledges an XADD once the entry is in memory; whether it
// survives a server restart depends on the server's persistence (AOF with
// appendfsync always or everysec, or RDB snapshots), which the publisher
// cannot see. Redis Streams (before the IDMP option of recent releases,
// not used here) do not deduplicate: a message republished after an
// ambiguous failure is a second entry with the same UUID, which consumers
// drop with the inbox.
//
// When some messages fail, the error wraps a [runtime.PublishErrors] with one
// entry per message. An entry is a [*runtime.PermanentError] for WRONGTYPE
// (the key is not a stream), a message above
// [PublisherConfig.MaxMessageBytes] ([ErrMessageTooLarge]) or the server's
// proto-max-bulk-len, and a message that cannot be encoded (metadata using
// the reserved key _watermill_message_uuid). OOM (maxmemory reached),
// connection errors and timeouts are retryable. When a message fails before
// it is sent, the later messages of its aggregate are not sent either. After
// [Publisher.Close], Publish returns [ErrPublisherClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if topic == "" {
		return runtime.Permanent(fmt.Errorf("redis: publish: empty topic"))
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := publishing.Context(msgs, p.cfg.PublishTimeout, nil)
	defer cancel()
	start := time.Now()

	errs := make(runtime.PublishErrors, len(msgs))
	failed := 0
	failedAggs := make(map[string]bool)
	fail := func(i int, err error) {
		if permanent(err) {
			err = runtime.Permanent(err)
		}
		errs[i] = err
		failed++
		if key := publishing.AggregateKey(msgs[i]); key != "" {
			failedAggs[key] = true
		}
	}
	pipe := p.client.Pipeline()
	cmds := make([]*goredis.StringCmd, len(msgs))
	for i, msg := range msgs {
		if key := publishing.AggregateKey(msg); key != "" && failedAggs[key] {
			errs[i] = errEarlierFailed
			failed++
			continue
		}
		args, err := p.xaddArgs(topic, msg)
		if err != nil {
			fail(i, fmt.Errorf("redis: publish message %s to topic %q: %w", msg.UUID, topic, err))
			continue
		}
		cmds[i] = pipe.XAdd(ctx, args)
	}
	var execErr error
	if pipe.Len() > 0 {
		// Exec's error is the first command's error; each command has its
		// own. But when no connection could be opened (go-redis runs AUTH
		// and SELECT as it opens one: a database the server does not have
		// fails there), the commands may carry no error and no reply.
		_, execErr = pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		err := cmd.Err()
		if err == nil && cmd.Val() == "" {
			// XADD answers the entry's id: without one, it did not run.
			err = execErr
			if err == nil {
				err = errors.New("no reply to XADD")
			}
		}
		if err != nil {
			fail(i, fmt.Errorf("redis: publish message %s to topic %q: %w", msgs[i].UUID, topic, err))
		}
	}
	if failed > 0 {
		return fmt.Errorf("redis: publish %d messages to topic %q: %w", len(msgs), topic, errs)
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic":    topic,
		"messages": len(msgs),
		"duration": time.Since(start),
	})
	return nil
}

// xaddArgs encodes msg for XADD to stream, with the trimming policy.
func (p *Publisher) xaddArgs(stream string, msg *message.Message) (*goredis.XAddArgs, error) {
	values, err := p.marshaler.Marshal(stream, msg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errMarshal, err)
	}
	size := 0
	for k, v := range values {
		size += len(k)
		switch v := v.(type) {
		case []byte:
			size += len(v)
		case string:
			size += len(v)
		}
	}
	if size > p.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, MaxMessageBytes is %d", ErrMessageTooLarge, size, p.cfg.MaxMessageBytes)
	}
	args := &goredis.XAddArgs{Stream: stream, Values: values}
	switch {
	case p.cfg.MaxLen > 0:
		args.MaxLen, args.Approx = p.cfg.MaxLen, true
	case p.cfg.MaxAge > 0:
		args.MinID, args.Approx = strconv.FormatInt(p.now().Add(-p.cfg.MaxAge).UnixMilli(), 10), true
	}
	return args, nil
}

// Close waits for in-flight Publish calls, then closes the client if the
// Publisher created it. It is safe to call more than once.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.ownClient {
		if err := p.client.Close(); err != nil {
			return fmt.Errorf("redis: close client: %w", err)
		}
	}
	return nil
}
