package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SubscriberConfig configures a [Subscriber]. ConsumerGroup is required;
// every other zero value means the documented default.
type SubscriberConfig struct {
	// URL is the server URL, or a comma-separated list of them.
	//
	// Default: nats.DefaultURL ("nats://127.0.0.1:4222"). Ignored when Conn
	// is set.
	URL string

	// Conn, if set, is the connection to consume on. The Subscriber does not
	// close it, and ReconnectWait and NatsOptions do not apply to it: give it
	// nats.MaxReconnects(-1), since nats.go's default gives up after 60
	// attempts (2 minutes) and closes the connection for good.
	//
	// Default: nil (NewSubscriber connects to URL and Close closes it).
	Conn *natsgo.Conn

	// ReconnectWait is how long the connection waits between two attempts
	// to reconnect after it lost the server (nats.go adds up to 100ms of
	// jitter, 1s with TLS). The connection NewSubscriber opens tries for
	// ever, and reconnects within about ReconnectWait (plus the jitter) of
	// the server being back; subscriptions then resume at once (see
	// [Subscriber.Subscribe]).
	//
	// Default: 2s (nats.go's). A nats.ReconnectWait or nats.MaxReconnects
	// option in NatsOptions overrides it or the endless retries.
	ReconnectWait time.Duration

	// NatsOptions are passed to nats.Connect, after the adapter's own
	// (nats.MaxReconnects(-1) and nats.ReconnectWait(ReconnectWait)), which
	// they override.
	//
	// Default: none.
	NatsOptions []natsgo.Option

	// ConsumerGroup names the group: one durable JetStream consumer per
	// topic's stream, named [ConsumerName](ConsumerGroup). Every group gets
	// every message; the subscribers of one group (in any process) share
	// them. A new group starts at the beginning of the stream. Required.
	ConsumerGroup string

	// Stream configures the stream the subscriber creates when it subscribes
	// to a topic nobody has published to yet. Use the publisher's values.
	Stream StreamConfig

	// AckWait is how long the server waits for an ack before it delivers a
	// message again (to any member of the group). It must be at least 1s. While a message is
	// handed out and neither acked nor nacked, the subscriber tells the
	// server it is in progress every AckWait/2, so a slow handler is not
	// redelivered behind its back: AckWait only bounds how soon the message
	// of a crashed member is delivered again.
	//
	// Default: 30s.
	AckWait time.Duration

	// MaxAckPending is how many messages the group may have delivered and
	// not yet acked. With 1, the group's messages are handled strictly one
	// after the other in stream order, across all its members: a nacked
	// message is delivered again before anything after it, so the order
	// per aggregate holds. Larger values trade that for throughput: after a
	// nack or an ack timeout, JetStream redelivers the message after others
	// that were delivered meanwhile, and several members handle messages
	// concurrently.
	//
	// Default: 1.
	MaxAckPending int

	// MaxDeliver is how many times a message is delivered before JetStream
	// gives up on it (and the group moves on). -1 means no limit.
	//
	// Default: -1 (a message nacked for ever blocks its group; handlers
	// dead-letter what they cannot handle instead).
	MaxDeliver int

	// MaxWait is how long one pull request waits on the server for a
	// message. Close waits up to this long for each subscription to end.
	//
	// Default: 1s.
	MaxWait time.Duration

	// NakDelay is how long the server waits before it delivers a nacked
	// message again.
	//
	// Default: 0 (at once).
	NakDelay time.Duration

	// ConfigureConsumer, if set, is called with the consumer config after
	// the defaults are set, to set what this struct does not expose. Durable,
	// Name and FilterSubject are set again after it runs; AckPolicy must stay
	// AckExplicitPolicy.
	//
	// Default: nil (no change).
	ConfigureConsumer func(*jetstream.ConsumerConfig)

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewSubscriber] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.URL == "" {
		c.URL = natsgo.DefaultURL
	}
	c.Stream.setDefaults()
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 1
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = -1
	}
	if c.MaxWait == 0 {
		c.MaxWait = time.Second
	}
	if c.ReconnectWait == 0 {
		c.ReconnectWait = defaultReconnectWait
	}
}

// Validate reports whether c is usable. A zero value other than
// ConsumerGroup is valid, since it means the default. The error wraps
// [ErrInvalidConfig].
func (c SubscriberConfig) Validate() error {
	if err := c.Stream.Validate(); err != nil {
		return err
	}
	switch {
	case c.ConsumerGroup == "":
		return fmt.Errorf("%w: no ConsumerGroup", ErrInvalidConfig)
	case c.AckWait < 0 || (c.AckWait > 0 && c.AckWait < time.Second):
		return fmt.Errorf("%w: AckWait %s is below 1s", ErrInvalidConfig, c.AckWait)
	case c.MaxWait < 0:
		return fmt.Errorf("%w: negative MaxWait %s", ErrInvalidConfig, c.MaxWait)
	case c.MaxAckPending < 0:
		return fmt.Errorf("%w: negative MaxAckPending %d", ErrInvalidConfig, c.MaxAckPending)
	case c.MaxDeliver < -1:
		return fmt.Errorf("%w: MaxDeliver %d is below -1", ErrInvalidConfig, c.MaxDeliver)
	case c.NakDelay < 0:
		return fmt.Errorf("%w: negative NakDelay %s", ErrInvalidConfig, c.NakDelay)
	case c.ReconnectWait < 0:
		return fmt.Errorf("%w: negative ReconnectWait %s", ErrInvalidConfig, c.ReconnectWait)
	}
	if c.ConfigureConsumer != nil {
		d := c
		d.setDefaults()
		if cc := d.consumerConfig("validate"); cc.AckPolicy != jetstream.AckExplicitPolicy {
			return fmt.Errorf("%w: ConfigureConsumer changed AckPolicy; it must stay AckExplicitPolicy", ErrInvalidConfig)
		}
	}
	return nil
}

// consumerConfig returns the group's consumer config for subject.
func (c SubscriberConfig) consumerConfig(subject string) jetstream.ConsumerConfig {
	name := ConsumerName(c.ConsumerGroup)
	cc := jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "gooutbox consumer group " + c.ConsumerGroup,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
		FilterSubject: subject,
	}
	if c.ConfigureConsumer != nil {
		c.ConfigureConsumer(&cc)
	}
	cc.Durable, cc.Name, cc.FilterSubject = name, "", subject
	return cc
}

// Subscriber is a Watermill [message.Subscriber] that reads a topic's
// stream through the consumer group's durable JetStream pull consumer. It
// is safe for concurrent use.
type Subscriber struct {
	cfg         SubscriberConfig
	nc          *natsgo.Conn
	ownsConn    bool
	js          jetstream.JetStream
	streams     *provisioner
	unmarshaler wmjs.Unmarshaler
	logger      watermill.LoggerAdapter

	closing chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber configured by cfg, connected to
// cfg.URL unless cfg.Conn is set. It logs to cfg.Logger.
// The error wraps [ErrInvalidConfig] when cfg is invalid.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	logger = logger.With(watermill.LogFields{"component": "nats_subscriber", "consumer_group": cfg.ConsumerGroup})
	nc, owned, err := connect(cfg.Conn, cfg.URL, cfg.ReconnectWait, cfg.NatsOptions)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		if owned {
			nc.Close()
		}
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return &Subscriber{
		cfg:         cfg,
		nc:          nc,
		ownsConn:    owned,
		js:          js,
		streams:     newProvisioner(js, cfg.Stream, false, logger),
		unmarshaler: wmjs.DefaultUnmarshaler{},
		logger:      logger,
		closing:     make(chan struct{}),
	}, nil
}

// SubscribeInitialize creates the topic's stream if no stream captures the
// topic's subject yet.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.isClosed() {
		return ErrSubscriberClosed
	}
	subject, err := Subject(topic)
	if err != nil {
		return fmt.Errorf("nats: subscribe initialize: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = s.streams.stream(ctx, topic, subject)
	return err
}

// Subscribe creates the topic's stream if needed, creates or updates the
// group's durable consumer on it, and returns a channel of its messages.
//
// One message is handed out at a time per subscription: the next is sent
// only after the current one is acked or nacked. Ack is confirmed by the
// server (DoubleAck) before the next message is taken. Nack makes the
// server deliver the message again after [SubscriberConfig.NakDelay]; with
// the default MaxAckPending of 1 it comes before any later message. When ctx
// ends or the Subscriber is closed, a message handed out and not yet acked
// is nacked, so another member gets it at once, and the channel is closed.
//
// Delivery is at least once: a message whose ack was lost is delivered
// again, with the same UUID.
//
// When the connection loses the server, the subscription waits for the
// reconnect ([SubscriberConfig.ReconnectWait]) without making pull
// requests, then acks again the messages it acked within the last AckWait
// (the restarted server may have lost those acks, and would hold the group
// back until AckWait had passed), and goes on. An ack whose confirmation
// failed because the connection was lost is sent again the same way.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrSubscriberClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	started := false
	defer func() {
		if !started {
			s.wg.Done()
		}
	}()

	subject, err := Subject(topic)
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe: %w", err)
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := s.streams.stream(setupCtx, topic, subject)
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe to topic %q: %w", topic, err)
	}
	cc := s.cfg.consumerConfig(subject)
	cons, err := s.js.CreateOrUpdateConsumer(setupCtx, stream, cc)
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe to topic %q: consumer %q on stream %q: %w", topic, cc.Durable, stream, err)
	}
	out := make(chan *message.Message)
	started = true
	go s.consume(ctx, cons, out, watermill.LogFields{"topic": topic, "stream": stream, "consumer": cc.Durable})
	return out, nil
}

// consume hands out the group's messages on out, one at a time, until ctx
// ends or the Subscriber closes.
//
// Each message is fetched with its own pull request for one message
// (Consumer.Next), and the next request is made only once the message is
// settled, so the subscription never has a pull request waiting on the
// server while it handles a message or after it has ended. That matters on
// nats-server 2.9: a redelivered message (after a nack or AckWait) that the
// server hands to a pull request whose subscriber is gone rewinds the
// consumer's stream sequence, after which the consumer delivers nothing
// more. A pull request waits at most [SubscriberConfig.MaxWait], which is
// also how long Close may wait for a subscription to end.
//
// While the connection is not connected, no pull request is made (it would
// wait in nats.go's reconnect buffer and reach the server after its
// subscriber had given up on it); the loop waits for the reconnect instead.
// After a reconnect, the messages acked recently are acked again
// ([ackLog]).
func (s *Subscriber) consume(ctx context.Context, cons jetstream.Consumer, out chan<- *message.Message, fields watermill.LogFields) {
	defer s.wg.Done()
	defer close(out)
	acks := ackLog{maxAge: s.cfg.AckWait}
	reconnects := s.nc.Stats().Reconnects
	for {
		if ctx.Err() != nil || s.isClosed() {
			return
		}
		if !s.awaitConnected(ctx) {
			return
		}
		if r := s.nc.Stats().Reconnects; r != reconnects {
			reconnects = r
			n := acks.resend(s.nc, time.Now())
			s.logger.Info("reconnected; acked the recent messages again", fields.Add(watermill.LogFields{"acks": n}))
		}
		jm, err := cons.Next(jetstream.FetchMaxWait(s.cfg.MaxWait))
		if err != nil {
			if errors.Is(err, natsgo.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				continue // no message within MaxWait
			}
			if ctx.Err() != nil || s.isClosed() {
				return
			}
			if connErr(s.nc.Status()) != nil {
				// Lost the server: awaitConnected waits for the reconnect.
				s.logger.Info("connection lost; waiting for the reconnect", fields.Add(watermill.LogFields{"error": err.Error()}))
				continue
			}
			if errors.Is(err, jetstream.ErrServerShutdown) {
				// The connection is about to drop; nobody needs to act.
				s.logger.Info("server shutting down; retrying after MaxWait", fields.Add(watermill.LogFields{"error": err.Error()}))
			} else {
				s.logger.Error("cannot fetch message; retrying after MaxWait", err, fields)
			}
			retry := time.NewTimer(s.cfg.MaxWait)
			select {
			case <-retry.C:
			case <-ctx.Done():
			case <-s.closing:
			}
			retry.Stop()
			continue
		}
		s.handle(ctx, jm, out, &acks, fields)
	}
}

// awaitConnected waits until the connection is connected (or closed for
// good, which Next then reports), and reports false when ctx ends or the
// Subscriber closes first.
func (s *Subscriber) awaitConnected(ctx context.Context) bool {
	waiting := func() bool {
		st := s.nc.Status()
		return st == natsgo.RECONNECTING || st == natsgo.DISCONNECTED || st == natsgo.CONNECTING
	}
	if !waiting() {
		return true
	}
	changed := s.nc.StatusChanged()
	defer s.nc.RemoveStatusListener(changed)
	for waiting() {
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-s.closing:
			return false
		}
	}
	return true
}

// ackLog holds the ack subjects of the messages a subscription acked within
// the last AckWait, at most maxAcks of them, so they can be acked again
// after a reconnect.
//
// An ack can be lost in a server restart: sent on a connection that
// dropped (DoubleAck then fails), or received by a server killed before it
// wrote the consumer's state (it writes it asynchronously: a SIGKILL right
// after an ack loses it, as TestServerRestart shows). The server then
// holds the message as delivered and unacked until AckWait has passed since
// its delivery, and with MaxAckPending 1 the whole group waits for it (up
// to 30s after a restart, with the defaults). Acking it again after the
// reconnect frees the group at once. An ack of a message the server no longer holds as
// pending is ignored, so acking again is harmless. An ack older than
// AckWait is not kept: the server has already delivered that message again
// if it lost the ack.
type ackLog struct {
	maxAge  time.Duration
	entries []ackEntry // oldest first, from entries[head]
	head    int
}

type ackEntry struct {
	subject string
	at      time.Time
}

// maxAcks bounds an [ackLog]: acks in the last second at one message a
// millisecond, far more than a server loses in a crash.
const maxAcks = 1024

// add records the ack of the message whose reply subject is subject.
func (l *ackLog) add(subject string, now time.Time) {
	if subject == "" {
		return
	}
	l.trim(now)
	if len(l.entries)-l.head == maxAcks {
		l.head++
	}
	l.entries = append(l.entries, ackEntry{subject, now})
	if l.head >= maxAcks {
		l.entries = append(l.entries[:0], l.entries[l.head:]...)
		l.head = 0
	}
}

// trim drops the acks older than maxAge.
func (l *ackLog) trim(now time.Time) {
	for l.head < len(l.entries) && now.Sub(l.entries[l.head].at) >= l.maxAge {
		l.entries[l.head] = ackEntry{}
		l.head++
	}
	if l.head == len(l.entries) {
		l.entries, l.head = l.entries[:0], 0
	}
}

// resend acks the recorded messages again (without waiting for the
// server's confirmation) and returns how many.
func (l *ackLog) resend(nc *natsgo.Conn, now time.Time) int {
	l.trim(now)
	n := 0
	for _, e := range l.entries[l.head:] {
		if nc.Publish(e.subject, ackBody) == nil {
			n++
		}
	}
	return n
}

// ackBody is the body of a JetStream ack.
var ackBody = []byte("+ACK")

// handle hands jm out and settles it. When the subscription ends before
// jm is acked or nacked, jm is nacked, so that another member of the group
// gets it at once.
func (s *Subscriber) handle(ctx context.Context, jm jetstream.Msg, out chan<- *message.Message, acks *ackLog, fields watermill.LogFields) {
	msg, err := s.unmarshaler.Unmarshal(jm)
	if err != nil {
		// Only a header with several values fails; it never will decode.
		s.logger.Error("cannot decode message; terminating it", err, fields)
		_ = jm.Term()
		return
	}
	fields = fields.Add(watermill.LogFields{"message_uuid": msg.UUID})
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(mctx)
	select {
	case out <- msg:
	case <-ctx.Done():
		s.nack(jm, 0, fields)
		return
	case <-s.closing:
		s.nack(jm, 0, fields)
		return
	}
	progress := time.NewTicker(s.cfg.AckWait / 2)
	defer progress.Stop()
	for {
		select {
		case <-msg.Acked():
			s.ack(jm, acks, fields)
			return
		case <-msg.Nacked():
			s.nack(jm, s.cfg.NakDelay, fields)
			return
		case <-progress.C:
			_ = jm.InProgress()
		case <-ctx.Done():
			s.settleOnEnd(msg, jm, acks, fields)
			return
		case <-s.closing:
			s.settleOnEnd(msg, jm, acks, fields)
			return
		}
	}
}

// settleOnEnd acks or nacks jm as msg was, or nacks it when msg was
// neither acked nor nacked.
func (s *Subscriber) settleOnEnd(msg *message.Message, jm jetstream.Msg, acks *ackLog, fields watermill.LogFields) {
	select {
	case <-msg.Acked():
		s.ack(jm, acks, fields)
	case <-msg.Nacked():
		s.nack(jm, s.cfg.NakDelay, fields)
	default:
		s.nack(jm, 0, fields)
	}
}

// ack acks jm and waits for the server to confirm it, and records the ack
// in acks. When the connection is not connected, or is lost before the
// confirmation, it does not wait: the ack is sent again after the reconnect.
func (s *Subscriber) ack(jm jetstream.Msg, acks *ackLog, fields watermill.LogFields) {
	acks.add(jm.Reply(), time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx, stop, err := whileConnected(ctx, s.nc)
	if err == nil {
		defer stop()
		err = jm.DoubleAck(ctx)
		if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.DeadlineExceeded) {
			err = cause // the connection was lost
		}
	}
	switch {
	case err == nil:
	case connErr(s.nc.Status()) != nil:
		s.logger.Info("cannot ack message; acking it again after the reconnect", fields.Add(watermill.LogFields{"error": err.Error()}))
	default:
		s.logger.Error("cannot ack message; it will be acked again after a reconnect or delivered again after AckWait", err, fields)
	}
}

// nack asks the server to deliver jm again after delay.
func (s *Subscriber) nack(jm jetstream.Msg, delay time.Duration, fields watermill.LogFields) {
	var err error
	if delay > 0 {
		err = jm.NakWithDelay(delay)
	} else {
		err = jm.Nak()
	}
	if err != nil {
		s.logger.Error("cannot nack message; it will be delivered again after AckWait", err, fields)
	}
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close ends every subscription (nacking the messages handed out and not
// yet acked), waits for them, and closes the connection if the Subscriber
// opened it. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.wg.Wait()
	if s.ownsConn {
		s.nc.Close()
	}
	return nil
}
