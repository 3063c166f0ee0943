package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
	"github.com/gooutbox/outbox/runtime"
)

// PublisherConfig configures a [Publisher]. Every zero value means the
// documented default.
type PublisherConfig struct {
	// URL is the server URL, or a comma-separated list of them.
	//
	// Default: nats.DefaultURL ("nats://127.0.0.1:4222"). Ignored when Conn
	// is set.
	URL string

	// Conn, if set, is the connection to publish on. The Publisher does not
	// close it, and ReconnectWait and NatsOptions do not apply to it: give it
	// nats.MaxReconnects(-1), since nats.go's default gives up after 60
	// attempts (2 minutes) and closes the connection for good.
	//
	// Default: nil (NewPublisher connects to URL and Close closes it).
	Conn *natsgo.Conn

	// ReconnectWait is how long the connection waits between two attempts
	// to reconnect after it lost the server (nats.go adds up to 100ms of
	// jitter, 1s with TLS). The connection NewPublisher opens tries for
	// ever, so it survives an outage of any length, and reconnects within
	// about ReconnectWait (plus the jitter) of the server being back. While
	// it is not connected, Publish fails at once (see [Publisher.Publish]).
	//
	// Default: 2s (nats.go's). A nats.ReconnectWait or nats.MaxReconnects
	// option in NatsOptions overrides it or the endless retries.
	ReconnectWait time.Duration

	// NatsOptions are passed to nats.Connect (credentials, TLS, name,
	// reconnect settings), after the adapter's own (nats.MaxReconnects(-1)
	// and nats.ReconnectWait(ReconnectWait)), which they override.
	//
	// Default: none.
	NatsOptions []natsgo.Option

	// Stream configures the streams the publisher creates or updates.
	Stream StreamConfig

	// PublishTimeout bounds one Publish call: finding or creating the
	// topic's stream, and waiting for the PubAcks. A message without a
	// PubAck by then fails (retryably: it may be stored, and its republish
	// is then deduplicated).
	//
	// Default: 10s.
	PublishTimeout time.Duration

	// MaxInFlight is how many messages of one Publish call are sent before
	// the publisher waits for their PubAcks. Larger values save round trips
	// for large batches; nats.go stalls at 4000 pending acks per connection.
	//
	// Default: 256.
	MaxInFlight int

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewPublisher] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *PublisherConfig) setDefaults() {
	if c.URL == "" {
		c.URL = natsgo.DefaultURL
	}
	c.Stream.setDefaults()
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = defaultReconnectWait
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 256
	}
}

// Validate reports whether c is usable; zero values are valid, since they
// mean the default. The error wraps [ErrInvalidConfig].
func (c PublisherConfig) Validate() error {
	if err := c.Stream.Validate(); err != nil {
		return err
	}
	switch {
	case c.PublishTimeout < 0:
		return fmt.Errorf("%w: negative PublishTimeout %s", ErrInvalidConfig, c.PublishTimeout)
	case c.ReconnectWait < 0:
		return fmt.Errorf("%w: negative ReconnectWait %s", ErrInvalidConfig, c.ReconnectWait)
	case c.MaxInFlight < 0 || c.MaxInFlight > 4000:
		return fmt.Errorf("%w: MaxInFlight %d is not in 0..4000", ErrInvalidConfig, c.MaxInFlight)
	}
	return nil
}

// Publisher is a Watermill [message.Publisher] that publishes to NATS
// JetStream. It is safe for concurrent use.
type Publisher struct {
	cfg       PublisherConfig
	nc        *natsgo.Conn
	ownsConn  bool
	js        jetstream.JetStream
	streams   *provisioner
	marshaler wmnats.Marshaler
	logger    watermill.LoggerAdapter

	// mu is held for reading by every Publish in flight and for writing by
	// Close, so Close waits for in-flight publishes.
	gate publishing.Gate // Publish calls and Close
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher configured by cfg, connected to
// cfg.URL unless cfg.Conn is set. It logs to cfg.Logger.
// Streams are created on first publish to a topic. The error wraps
// [ErrInvalidConfig] when cfg is invalid.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	logger = logger.With(watermill.LogFields{"component": "nats_publisher"})
	nc, owned, err := connect(cfg.Conn, cfg.URL, cfg.ReconnectWait, cfg.NatsOptions)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4000),
		jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		if owned {
			nc.Close()
		}
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return &Publisher{
		cfg:       cfg,
		nc:        nc,
		ownsConn:  owned,
		js:        js,
		streams:   newProvisioner(js, cfg.Stream, true, logger),
		marshaler: &wmnats.NATSMarshaler{},
		logger:    logger,
	}, nil
}

// Publish publishes msgs to topic and returns nil only when JetStream has
// acknowledged every message (a PubAck: the message is stored in the
// stream, on disk with the default file storage).
//
// The topic is the subject ([Subject]); on first use, the publisher finds
// the stream that captures it or creates its own ([StreamName]). Each
// message's Nats-Msg-Id is its UUID (the event id), so a republish within
// [StreamConfig.DedupWindow] is acknowledged as a duplicate and not stored
// again: that counts as success. A message re-driven from a dead-letter
// topic (it carries runtime/consumer's outbox_dlq_at metadata) gets the UUID
// and that time instead, so it is not taken for the publish it failed
// after; re-driving the same dead letter twice still stores it once. Metadata travels as headers and the UUID
// in the _watermill_message_uuid header (watermill-nats's NATSMarshaler).
//
// Messages are sent in order, up to [PublisherConfig.MaxInFlight] at a time,
// before their PubAcks are awaited, but at most one message of an aggregate
// (aggregate_type and aggregate_id metadata) is in flight: the next one of
// that aggregate waits for its PubAck. So one Publish costs about one round
// trip per MaxInFlight messages of distinct aggregates, and one per message
// of a call that holds a single aggregate. JetStream stores one connection's
// messages in the order sent. When a message of an aggregate fails before
// it is sent (too large, say), or its PubAck reports an error or never
// comes, the later messages of that aggregate in the call are not sent (they
// fail with a retryable error), so they never overtake it.
//
// When some messages fail, the error wraps a [runtime.PublishErrors] with one
// entry per message. An entry is a [*runtime.PermanentError] when retrying
// cannot help: nats.ErrMaxPayload (larger than the server's max_payload),
// JetStream error 10054 (larger than the stream's max_msg_size), or an
// invalid subject. A topic that is not a valid subject fails the whole call
// with a permanent error wrapping [ErrInvalidTopic]. No responders (no
// stream, JetStream down), timeouts and connection errors are retryable,
// and transient ([*runtime.TransientError]): the outbox store retries them
// without counting an attempt toward parking.
// After [Publisher.Close], Publish returns [ErrPublisherClosed].
//
// Publish fails at once, without sending anything, while the connection is
// not connected: the error wraps nats.ErrConnectionReconnecting while it
// reconnects (nats.ErrConnectionClosed once closed, nats.ErrDisconnected or
// nats.ErrConnectionDraining otherwise). When the connection is lost during
// the call, the messages not yet acknowledged fail at once with that error,
// and the rest are not sent. So a server restart or outage costs the caller
// one quick retryable failure per try, not PublishTimeout, and nothing is
// left in nats.go's reconnect buffer, where a message's PubAck would be
// lost: the relay tries again after its backoff, and succeeds once the
// connection is back ([PublisherConfig.ReconnectWait]). A message that
// fails this way may still be stored (it was sent and its PubAck is
// missing); its republish is then acknowledged as a duplicate.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	return p.gate.Publish(ErrPublisherClosed, transient, func() error { return p.publish(topic, msgs) })
}

// publish is [Publisher.Publish] within the gate: no Close runs meanwhile.
func (p *Publisher) publish(topic string, msgs []*message.Message) (err error) {
	subject, err := Subject(topic)
	if err != nil {
		return runtime.Permanent(fmt.Errorf("nats: publish: %w", err))
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := publishing.Context(msgs, p.cfg.PublishTimeout, nil)
	defer cancel()
	ctx, stop, err := whileConnected(ctx, p.nc)
	if err != nil {
		return fmt.Errorf("nats: publish %d messages to topic %q: %w", len(msgs), topic, err)
	}
	defer stop()
	start := time.Now()
	stream, err := p.streams.stream(ctx, topic, subject)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			// The connection was lost: say so rather than "context canceled".
			err = fmt.Errorf("%v: %w", err, cause)
		}
		return fmt.Errorf("nats: publish %d messages to topic %q: %w", len(msgs), topic, err)
	}

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
		if !permanent(err) {
			// The stream may be gone (no responders) or another stream may
			// capture the subject now (Nats-Expected-Stream refused): look
			// it up again on the next call.
			p.streams.forget(subject)
		}
	}
	type inFlight struct {
		i   int
		fut jetstream.PubAckFuture
	}
	window := make([]inFlight, 0, min(len(msgs), p.cfg.MaxInFlight))
	// inWindow holds the aggregates with a message in the window: a second
	// message of one waits for the first's PubAck, since JetStream may
	// refuse the first in its PubAck (max_msg_size, stream limits) or lose
	// it with the connection, and store the second anyway.
	inWindow := make(map[string]bool)
	duplicates := 0
	await := func() {
		for _, f := range window {
			select {
			case ack := <-f.fut.Ok():
				if ack.Duplicate {
					duplicates++
				}
			case err := <-f.fut.Err():
				fail(f.i, fmt.Errorf("nats: publish message %s to topic %q: %w", msgs[f.i].UUID, topic, err))
			case <-ctx.Done():
				fail(f.i, fmt.Errorf("nats: publish message %s to topic %q: no PubAck: %w", msgs[f.i].UUID, topic, context.Cause(ctx)))
			}
		}
		window = window[:0]
		clear(inWindow)
	}
	for i, msg := range msgs {
		key := publishing.AggregateKey(msg)
		if len(window) == p.cfg.MaxInFlight || (key != "" && inWindow[key]) {
			await()
		}
		if key != "" && failedAggs[key] {
			errs[i] = errEarlierFailed
			failed++
			continue
		}
		if ctx.Err() != nil {
			// Lost connection or timeout: sending now would only fill the
			// reconnect buffer.
			fail(i, fmt.Errorf("nats: publish message %s to topic %q: not sent: %w", msg.UUID, topic, context.Cause(ctx)))
			continue
		}
		fut, err := p.send(subject, stream, msg)
		if err != nil {
			fail(i, fmt.Errorf("nats: publish message %s to topic %q: %w", msg.UUID, topic, err))
			continue
		}
		window = append(window, inFlight{i, fut})
		if key != "" {
			inWindow[key] = true
		}
	}
	await()
	if failed > 0 {
		return fmt.Errorf("nats: publish %d messages to topic %q: %w", len(msgs), topic, errs)
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic":      topic,
		"stream":     stream,
		"messages":   len(msgs),
		"duplicates": duplicates,
		"duration":   time.Since(start),
	})
	return nil
}

// send marshals msg and publishes it asynchronously, with the UUID as
// Nats-Msg-Id (with the dead-letter time of a re-driven dead letter:
// publishing.DedupID) and the stream it must land in as
// Nats-Expected-Stream.
func (p *Publisher) send(subject, stream string, msg *message.Message) (jetstream.PubAckFuture, error) {
	nm, err := p.marshaler.Marshal(subject, msg)
	if err != nil {
		return nil, err
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(stream)}
	if msg.UUID != "" {
		opts = append(opts, jetstream.WithMsgID(publishing.DedupID(msg)))
	}
	return p.js.PublishMsgAsync(nm, opts...)
}

// Ping checks that the server answers: a PING round trip on the
// publisher's connection (nats.Conn.FlushWithContext), which fails at once
// while the connection is not connected. The readiness check of
// runtime/health calls it (health.Config.Broker). It is safe for concurrent
// use.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats: ping: %w", err)
	}
	return nil
}

// Close waits for in-flight Publish calls, then closes the connection if
// the Publisher opened it. It is safe to call more than once.
func (p *Publisher) Close() error {
	return p.gate.Close(func() error {
		if p.ownsConn {
			p.nc.Close()
		}
		return nil
	})
}

// transient reports whether a publish error is the server's or the
// connection's rather than the message's: a connection not connected
// (reconnecting, disconnected, draining, closed), no servers, no
// responders (JetStream or the stream has no leader), a timeout waiting
// for a PubAck, JetStream unavailable (a 503 API error), or a network
// error.
func transient(err error) bool {
	for _, e := range []error{natsgo.ErrConnectionClosed, natsgo.ErrConnectionReconnecting, natsgo.ErrDisconnected,
		natsgo.ErrConnectionDraining, natsgo.ErrNoServers, natsgo.ErrNoResponders, natsgo.ErrTimeout,
		jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled} {
		if errors.Is(err, e) {
			return true
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true
	}
	return publishing.ConnectionLost(err)
}
