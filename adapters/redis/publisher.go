package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
//
// # Deduplication
//
// Redis Streams append whatever XADD they are given. A write can reach the
// server long after the publisher gave up on it: a connection stalls (a
// proxy that stops forwarding but buffers, a partition that heals and TCP
// retransmits), go-redis times the read out and retries on a new connection
// (or Publish fails and the relay retries), the retry succeeds, the relay
// publishes the aggregate's next events, and then the stalled bytes arrive
// and add the message again, after them. So the publisher adds each message
// through a Lua script that first sets a key for the message
// (SET NX PX [PublisherConfig.DedupWindow]) and adds the entry only if the
// key was not there: a second write of the same message UUID within the
// window, stale or retried, adds nothing, and Publish counts it as
// published (it is in the stream already).
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

	// DedupWindow is how long the publisher remembers a message UUID it
	// added to a stream, so that a stale or repeated write of the message
	// (see Deduplication) is dropped by Redis instead of appended again.
	// A write that arrives later than this after the first one is a second
	// entry, which consumers drop with the inbox. A message re-driven from
	// a dead-letter topic (it carries runtime/consumer's outbox_dlq_at
	// metadata) is remembered as "<uuid>/dlq/<that time>", so the re-drive
	// is not dropped as a repeat of the publish it failed after. Negative disables
	// deduplication: a plain XADD per message, as before. Positive values
	// below a millisecond (the resolution of PX) are invalid.
	//
	// The publisher remembers message <uuid> of stream <s> in the string
	// key "{<s>}:outbox:dedup:<uuid>", with the stream name as its Redis
	// Cluster hash tag, so the key lives in the stream's slot. A stream
	// whose name has a hash tag of its own, "{orders}.placed", keys
	// "{orders}{orders}.placed:outbox:dedup:<uuid>", routed by the same
	// tag; a name with "}" but no hash tag, "a}b", gets a numeric tag that
	// hashes to its slot: "{20658}a}b:outbox:dedup:<uuid>".
	//
	// Each remembered UUID is one key with a TTL: about 140 bytes plus the
	// stream name's length (on Redis 7.0, x86-64, a 23-character name: 165
	// bytes per key measured with used_memory over 100,000 keys; MEMORY
	// USAGE reports 120, without the expiry entry and the hash tables).
	// Budget bytes × events per second × DedupWindow in seconds: 100
	// events/s with the default window hold 60,000 keys, about 10 MB;
	// 1,000 events/s, about 100 MB. Under an eviction policy
	// (maxmemory-policy volatile-* in particular, which picks keys with a
	// TTL) Redis may evict keys early and let a duplicate through.
	//
	// The script costs Redis time: against a local Redis 7.0 on 2 cores,
	// 100-message batches publish at about 48,000 messages/s with
	// deduplication and 105,000 without (BenchmarkPublish). It runs on any
	// Redis with streams; the XADD IDMP option of recent Redis releases,
	// which deduplicates in the stream itself, is not used.
	//
	// Default: 0, meaning [DefaultDedupWindow] (10 minutes): longer than
	// go-redis's timeouts and retries (seconds), the relay's backoff (5 s
	// at most by default), and the time the kernel keeps retransmitting the
	// data of a connection go-redis closed (about 2 minutes with Linux's
	// defaults), with room for a proxy that buffers for minutes.
	DedupWindow time.Duration

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
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
}

// Validate reports whether c is usable; zero values are valid, since they
// mean the default, and so is a negative DedupWindow. The error wraps
// [ErrInvalidConfig].
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
	case c.DedupWindow > 0 && c.DedupWindow < time.Millisecond:
		return fmt.Errorf("%w: DedupWindow %s is below 1ms, the resolution of PX (negative disables deduplication)", ErrInvalidConfig, c.DedupWindow)
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
	window    string // DedupWindow in milliseconds; "" when disabled

	gate publishing.Gate // Publish calls and Close
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
	var window string
	if cfg.DedupWindow > 0 {
		window = strconv.FormatInt(cfg.DedupWindow.Milliseconds(), 10)
	}
	return &Publisher{
		cfg:       cfg,
		client:    client,
		ownClient: owned,
		marshaler: redisstream.DefaultMarshallerUnmarshaller{},
		logger:    logger.With(watermill.LogFields{"component": "redis_publisher"}),
		now:       time.Now,
		window:    window,
	}, nil
}

// Publish adds msgs to the stream named topic, each with one XADD, all sent
// in one pipeline (one round trip), in order, and returns nil only when
// Redis has replied to every message with an entry id, or, with
// deduplication (the default), with the answer that the message is in the
// stream already. Redis executes one connection's commands in order, so the
// stream holds the messages in the order given.
//
// With deduplication ([PublisherConfig.DedupWindow]) each XADD runs inside
// a Lua script (EVALSHA; the script is loaded with SCRIPT LOAD the first
// time the server answers NOSCRIPT, and the messages so answered are sent
// again) that drops a message whose UUID the stream received within the
// window: a republish after an ambiguous failure, or a stale write that a
// stalled connection delivers late, adds nothing. Later writes are added
// again, with the same UUID, and consumers drop them with the inbox.
//
// Redis acknowledges an XADD once the entry is in memory; whether it
// survives a server restart depends on the server's persistence (AOF with
// appendfsync always or everysec, or RDB snapshots), which the publisher
// cannot see. The deduplication keys share the entries' fate: the script's
// writes are persisted and replicated together.
//
// When some messages fail, the error wraps a [runtime.PublishErrors] with one
// entry per message. An entry is a [*runtime.PermanentError] for WRONGTYPE
// (the key is not a stream), a message above
// [PublisherConfig.MaxMessageBytes] ([ErrMessageTooLarge]) or the server's
// proto-max-bulk-len, and a message that cannot be encoded (metadata using
// the reserved key _watermill_message_uuid). OOM (maxmemory reached),
// connection errors and timeouts are retryable; a failed message's
// deduplication key is not kept, so its retry is added. When a message fails
// before it is sent, the later messages of its aggregate are not sent
// either. After [Publisher.Close], Publish returns [ErrPublisherClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.gate.Publish(ErrPublisherClosed, transient, func() error { return p.publish(topic, msgs) })
}

// publish is [Publisher.Publish] within the gate: no Close runs meanwhile.
func (p *Publisher) publish(topic string, msgs []*message.Message) (err error) {
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
	var keyPrefix string
	if p.window != "" {
		keyPrefix = dedupKeyPrefix(topic)
	}
	pipe := p.client.Pipeline()
	cmds := make([]goredis.Cmder, len(msgs))
	scripts := make([][]any, len(msgs)) // the script's ARGV, to send again after NOSCRIPT
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
		if p.window == "" {
			cmds[i] = pipe.XAdd(ctx, args)
			continue
		}
		scripts[i] = scriptArgs(p.window, args)
		cmds[i] = addScript.EvalSha(ctx, pipe, []string{topic, keyPrefix + publishing.DedupID(msg)}, scripts[i]...)
	}
	var execErr error
	if pipe.Len() > 0 {
		// Exec's error is the first command's error; each command has its
		// own. But when no connection could be opened (go-redis runs AUTH
		// and SELECT as it opens one: a database the server does not have
		// fails there), the commands may carry no error and no reply.
		_, execErr = pipe.Exec(ctx)
	}
	if p.window != "" {
		p.resendNoScript(ctx, topic, keyPrefix, msgs, cmds, scripts)
	}
	duplicates := 0
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		dup, err := reply(cmd)
		if err == errNoReply && execErr != nil {
			err = execErr
		}
		if err != nil {
			fail(i, fmt.Errorf("redis: publish message %s to topic %q: %w", msgs[i].UUID, topic, err))
		} else if dup {
			duplicates++
		}
	}
	if failed > 0 {
		return fmt.Errorf("redis: publish %d messages to topic %q: %w", len(msgs), topic, errs)
	}
	if duplicates > 0 {
		p.logger.Info("messages already in the stream were not added again", watermill.LogFields{
			"topic":      topic,
			"duplicates": duplicates,
			"window":     p.cfg.DedupWindow,
		})
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic":    topic,
		"messages": len(msgs),
		"duration": time.Since(start),
	})
	return nil
}

// resendNoScript loads addScript and runs it again for the messages whose
// EVALSHA the server answered with NOSCRIPT (a server that never ran it,
// restarted, or ran SCRIPT FLUSH), replacing their commands in cmds.
// SCRIPT LOAD goes to every primary of a cluster. The messages are sent
// again in order, after the call's others. That reorders nothing: once a
// server answers NOSCRIPT it answers it to every later EVALSHA until the
// script is loaded again, which only another client's SCRIPT LOAD racing
// this pipeline could do.
func (p *Publisher) resendNoScript(ctx context.Context, topic, keyPrefix string, msgs []*message.Message, cmds []goredis.Cmder, scripts [][]any) {
	var again []int
	for i, cmd := range cmds {
		if cmd != nil && scripts[i] != nil && goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	if err := addScript.Load(ctx, p.client).Err(); err != nil {
		for _, i := range again {
			cmds[i].SetErr(fmt.Errorf("load the deduplicating script: %w", err))
		}
		return
	}
	pipe := p.client.Pipeline()
	for _, i := range again {
		cmds[i] = addScript.EvalSha(ctx, pipe, []string{topic, keyPrefix + publishing.DedupID(msgs[i])}, scripts[i]...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, i := range again {
			if _, rerr := reply(cmds[i]); rerr == errNoReply {
				cmds[i].SetErr(err)
			}
		}
	}
}

// errNoReply is the error of a command that has neither a reply nor an
// error: it was not run.
var errNoReply = errors.New("no reply to XADD")

// reply reports how Redis answered cmd, an XADD or an addScript: an entry
// id (nil error), a message already added (dup), an error reply, or no
// reply at all ([errNoReply]).
func reply(cmd goredis.Cmder) (dup bool, err error) {
	if err := cmd.Err(); err != nil {
		return false, err
	}
	switch cmd := cmd.(type) {
	case *goredis.StringCmd:
		if cmd.Val() == "" {
			return false, errNoReply
		}
		return false, nil
	case *goredis.Cmd:
		switch v := cmd.Val().(type) {
		case nil:
			return false, errNoReply
		case string:
			if v != "" {
				return false, nil
			}
		case int64:
			if v == 0 {
				return true, nil
			}
		}
		return false, fmt.Errorf("unexpected reply %v to the deduplicating XADD script", cmd.Val())
	}
	return false, fmt.Errorf("unexpected command %T", cmd)
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

// Ping checks that the server answers a PING on the publisher's client.
// The readiness check of runtime/health calls it (health.Config.Broker). It
// is safe for concurrent use.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Close waits for in-flight Publish calls, then closes the client if the
// Publisher created it. It is safe to call more than once.
func (p *Publisher) Close() error {
	return p.gate.Close(func() error {
		if !p.ownClient {
			return nil
		}
		if err := p.client.Close(); err != nil {
			return fmt.Errorf("redis: close client: %w", err)
		}
		return nil
	})
}

// transient reports whether a publish error is the server's or the
// connection's rather than the message's: a network error or timeout, a
// pool exhausted, or a reply that says the server cannot serve now
// (LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY: a replica
// that was a primary before a failover).
func transient(err error) bool {
	if errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrPoolExhausted) || publishing.ConnectionLost(err) {
		return true
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	for _, prefix := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"} {
		if strings.HasPrefix(rerr.Error(), prefix) {
			return true
		}
	}
	return false
}
