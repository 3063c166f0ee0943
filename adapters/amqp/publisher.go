package amqp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/gooutbox/outbox/adapters/internal/fence"
	"github.com/gooutbox/outbox/adapters/internal/publishing"
	"github.com/gooutbox/outbox/runtime"
)

// errConfirmTimeout is the cause of a publish context that ran out of
// Config.ConfirmTimeout.
var errConfirmTimeout = errors.New("no confirmation within ConfirmTimeout")

// returnBuffer is the capacity of a channel's basic.return listener.
// amqp091-go blocks its reader while the listener is full, and Publish
// drains it after every message it sends and while it waits for confirms.
const returnBuffer = 256

// Publisher is a Watermill [message.Publisher] for RabbitMQ that declares
// the topology of a topic before its first publish on a connection and
// publishes with publisher confirms and the mandatory flag, so that
// [Publisher.Publish] returns nil only for messages a queue has taken (see
// the package documentation). It is safe for concurrent use: each Publish
// call publishes on its own confirm-mode channel of one shared connection.
type Publisher struct {
	cfg    Config
	logger watermill.LoggerAdapter

	mu   sync.Mutex
	conn *amqp091.Connection
	// gate fences conn's publishing frames (see Fencing in the package
	// doc); nil when conn is not fenced (amqps://, or a Config.AMQPConfig
	// Dial that returns no TCP connection).
	gate     *fence.Gate
	declared map[string]bool // topics whose topology is declared on conn
	idle     []*pubChannel   // confirm-mode channels of conn, unused
	closed   bool
	inflight sync.WaitGroup
}

var _ message.Publisher = (*Publisher)(nil)

// pubChannel is a confirm-mode channel with its return and close listeners.
type pubChannel struct {
	conn     *amqp091.Connection
	gate     *fence.Gate // conn's, or nil
	ch       *amqp091.Channel
	returns  chan amqp091.Return
	closes   chan *amqp091.Error
	closeErr *amqp091.Error
}

// closeError returns the error the channel was closed with, or nil while it
// is open (or was closed by this client).
func (pc *pubChannel) closeError() *amqp091.Error {
	if pc.closeErr == nil {
		select {
		case e := <-pc.closes:
			pc.closeErr = e
		default:
		}
	}
	return pc.closeErr
}

// NewPublisher returns a Publisher configured by cfg. It logs to cfg.Logger.
// It does not contact the broker; the first Publish does. The error wraps
// [ErrInvalidConfig] when cfg is invalid or sets Group.
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Group != "" {
		return nil, fmt.Errorf("%w: Group is for subscribers; a publisher declares the queues of Groups", ErrInvalidConfig)
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	return &Publisher{
		cfg:    cfg,
		logger: logger.With(watermill.LogFields{"component": "amqp_publisher"}),
	}, nil
}

// Publish publishes msgs to topic, in order, on one confirm-mode channel,
// and returns when the broker has confirmed every message or the rest can no
// longer be confirmed. Before the first publish to topic on a connection it
// declares the topology (see [Mode]); a declaration failure fails the whole
// call, retryably. Messages are published with the mandatory flag and the
// message-id property set to the UUID.
//
// It returns nil only when every message was confirmed (basic.ack) and none
// was returned (basic.return). Otherwise the error wraps a
// [runtime.PublishErrors] with one entry per message, nil for the messages
// the broker took:
//
//   - returned unroutable: an [*UnroutableError] naming the exchange and
//     routing key, wrapped in a [runtime.PermanentError] when this call
//     declared the topology; retryable when the topology was declared by an
//     earlier call (the queue may have been deleted or expired since, and
//     the retry declares it again);
//   - larger than the broker's max_message_size: permanent,
//     [ErrMessageTooLarge];
//   - nacked by the broker: [ErrNacked], retryable;
//   - not confirmed because the channel or connection closed, the call
//     timed out ([Config.ConfirmTimeout]) or a message's context ended:
//     [ErrUnconfirmed], retryable and ambiguous (the broker may hold it).
//
// Failures of the broker or the connection, not of the message, are
// [*runtime.TransientError]s (the package doc's Error classes): the outbox
// store retries them without counting an attempt toward parking.
//
// An invalid topic is a permanent error for the whole call. A closed
// connection is dialled again by the next Publish. After [Publisher.Close],
// Publish returns [ErrPublisherClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) (err error) {
	defer func() { err = publishing.Classify(err, transient) }()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrPublisherClosed
	}
	p.inflight.Add(1)
	p.mu.Unlock()
	defer p.inflight.Done()

	if err := p.validateTopic(topic); err != nil {
		return runtime.Permanent(err)
	}
	if len(msgs) == 0 {
		return nil
	}
	pubs := make([]amqp091.Publishing, len(msgs))
	for i, msg := range msgs {
		pub, err := p.cfg.Marshaler.Marshal(msg)
		if err != nil {
			return runtime.Permanent(fmt.Errorf("amqp: marshal message %s for topic %q: %w", msg.UUID, topic, err))
		}
		if pub.MessageId == "" {
			pub.MessageId = msg.UUID
		}
		if pub.MessageId == "" {
			pub.MessageId = watermill.NewUUID()
		}
		if !p.cfg.NotDurable {
			pub.DeliveryMode = amqp091.Persistent
		}
		pubs[i] = pub
	}

	ctx, cancel := publishing.Context(msgs, p.cfg.ConfirmTimeout, errConfirmTimeout)
	defer cancel()
	start := time.Now()
	pc, declared, end, err := p.channel(ctx, topic)
	if err != nil {
		return fmt.Errorf("amqp: publish %d messages to topic %q: %w", len(msgs), topic, err)
	}
	errs, timedOut := p.publish(ctx, pc, topic, pubs, declared)
	switch {
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), errConfirmTimeout) && pc.gate != nil:
		// The call's context ended (the relay's lease, say) before it
		// did: fence the connection off, so that nothing this call
		// still had to send reaches the broker after it.
		p.fenceOff(pc)
	case timedOut && errors.Is(context.Cause(ctx), errConfirmTimeout):
		p.abandon(pc.conn)
	}
	end()
	p.release(pc, !timedOut)
	failed := 0
	for _, e := range errs {
		if e != nil {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("amqp: publish %d messages to topic %q: %w", len(msgs), topic, errs)
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic":    topic,
		"messages": len(msgs),
		"duration": time.Since(start),
	})
	return nil
}

// validateTopic rejects topics that cannot name the queues and exchanges of
// the Config's Mode.
func (p *Publisher) validateTopic(topic string) error {
	longest := topic
	for _, g := range p.cfg.Groups {
		if q := p.cfg.queueName(topic, g); len(q) > len(longest) {
			longest = q
		}
	}
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty topic", ErrInvalidTopic)
	case len(longest) > 255:
		return fmt.Errorf("%w: %q is longer than AMQP's 255 bytes", ErrInvalidTopic, longest)
	case strings.HasPrefix(topic, "amq."):
		return fmt.Errorf("%w: %q starts with the reserved prefix amq.", ErrInvalidTopic, topic)
	}
	return nil
}

// channel returns an idle confirm-mode channel, or a new one, on a
// connection that is dialled if needed, with topic's topology declared, and
// whether this call declared it (rather than an earlier one on the same
// connection).
func (p *Publisher) channel(ctx context.Context, topic string) (pc *pubChannel, declared bool, end func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil && (p.gate.Abandoned() || p.gate.Closed()) {
		// A call on the connection was abandoned while it still had
		// frames to send (its caller went on to this call): those must
		// not go out with this call's. Or the gate refused a late frame
		// and closed: the connection is being aborted.
		p.fenceOffLocked()
	}
	if p.conn == nil || p.conn.IsClosed() {
		if err := p.dial(ctx); err != nil {
			return nil, false, nil, err
		}
	}
	end = func() {}
	if p.gate != nil {
		end = p.gate.Begin(ctx)
	}
	defer func() {
		if err != nil {
			end()
		}
	}()
	pc, declared, err = p.openOrReuse(ctx, topic)
	return pc, declared, end, err
}

// openOrReuse returns an idle channel of p.conn, or a new one, with
// topic's topology declared (see channel). p.mu is held.
func (p *Publisher) openOrReuse(ctx context.Context, topic string) (*pubChannel, bool, error) {
	// Opening a channel and declaring are RPCs without a deadline of their
	// own: if ctx ends first, close the connection under them, which ends
	// them with an error (and the next Publish dials again).
	conn := p.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now().Add(time.Second)) })
	defer stop()
	var pc *pubChannel
	for len(p.idle) > 0 && pc == nil {
		pc = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if pc.ch.IsClosed() {
			pc = nil
		}
	}
	if pc == nil {
		var err error
		if pc, err = p.openChannel(); err != nil {
			return nil, false, err
		}
	}
	if ctx.Err() != nil {
		p.closeChannel(pc)
		return nil, false, fmt.Errorf("%w: %w", ErrUnconfirmed, context.Cause(ctx))
	}
	if p.declared[topic] {
		return pc, false, nil
	}
	if err := p.declare(pc.ch, topic); err != nil {
		p.closeChannel(pc)
		return nil, false, fmt.Errorf("amqp: declare topology for topic %q: %w", topic, err)
	}
	p.declared[topic] = true
	return pc, true, nil
}

// Connect dials the broker now rather than at the first Publish, and keeps
// the connection for Publish; it returns nil at once when connected. Use it
// to fail fast at start: the error wraps [ErrAccessRefused] when the broker
// refused the connection (a username or password it does not allow, a
// vhost the user may not use), which no retry mends, and [ErrPublisherClosed]
// after Close. Dialling and the AMQP handshake end when ctx does (RabbitMQ
// answers a refused login only after a delay, 3 s by default).
func (p *Publisher) Connect(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	return p.dial(ctx)
}

// Ping checks that the broker can be reached: it returns nil while the
// publisher's connection is open, and dials it otherwise ([Publisher.Connect]).
// The readiness check of runtime/health calls it (health.Config.Broker), so
// that a relay that cannot reach RabbitMQ is not ready. A connection that
// hangs without closing is noticed by its heartbeats (amqp091's default:
// 10 s). It is safe for concurrent use.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.Connect(ctx); err != nil {
		return fmt.Errorf("amqp: ping: %w", err)
	}
	return nil
}

// dial connects to the broker, giving up when ctx ends (unless
// Config.AMQPConfig sets its own Dial). p.mu is held.
func (p *Publisher) dial(ctx context.Context) error {
	for _, pc := range p.idle {
		p.closeChannel(pc)
	}
	p.idle = nil
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn = nil
	if p.gate != nil {
		p.gate.Close()
	}
	p.gate = nil
	g := fence.NewGate(classifyFrame)
	fenced := false // the connection dialled is g's
	cfg := amqp091.Config{}
	if p.cfg.AMQPConfig != nil {
		cfg = *p.cfg.AMQPConfig
	}
	if cfg.TLSClientConfig == nil {
		cfg.TLSClientConfig = p.cfg.TLSConfig
	}
	var stopAbort func() bool // stops aborting the handshake when ctx ends
	if cfg.Dial == nil {
		timeout := p.cfg.ConfirmTimeout
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// As amqp091.DefaultDial: a deadline for the TLS and AMQP
			// handshakes, which amqp091 clears once connected; and a
			// deadline now when ctx ends first.
			if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
				_ = conn.Close()
				return nil, err
			}
			stopAbort = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
			return conn, nil
		}
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.Locale == "" {
		cfg.Locale = "en_US"
	}
	if dial := cfg.Dial; !strings.HasPrefix(strings.ToLower(p.cfg.URL), "amqps:") {
		// Fenced, below amqp091's framing: the TLS of amqps:// is
		// amqp091's own, on top of what Dial returns, where the gate
		// would see no frames.
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			conn, err := dial(network, addr)
			if err != nil {
				return nil, err
			}
			if _, ok := conn.(*net.TCPConn); !ok {
				return conn, nil
			}
			fenced = true
			return g.Wrap(conn, nil)
		}
	}
	conn, err := amqp091.DialConfig(p.cfg.URL, cfg)
	if stopAbort != nil && !stopAbort() && err == nil {
		// ctx ended as the handshake completed: the deadline set then
		// would break the connection later.
		_ = conn.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		if refused(err) {
			return fmt.Errorf("amqp: dial: %w: %w", ErrAccessRefused, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("amqp: dial: %w (%w)", context.Cause(ctx), err)
		}
		return fmt.Errorf("amqp: dial: %w", err)
	}
	p.conn = conn
	if fenced {
		p.gate = g
	}
	p.declared = map[string]bool{}
	p.logger.Info("connected", nil)
	return nil
}

// refused reports whether err is the broker's refusal of a connection:
// 403 ACCESS_REFUSED (credentials, SASL mechanism, vhost access) or 530
// NOT_ALLOWED (a vhost that does not exist, on some versions).
func refused(err error) bool {
	var ae *amqp091.Error
	return errors.As(err, &ae) && (ae.Code == amqp091.AccessRefused || ae.Code == amqp091.NotAllowed)
}

// openChannel opens a confirm-mode channel on p.conn. p.mu is held.
func (p *Publisher) openChannel() (*pubChannel, error) {
	ch, err := p.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: put channel in confirm mode: %w", err)
	}
	return &pubChannel{
		conn:    p.conn,
		gate:    p.gate,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp091.Return, returnBuffer)),
		closes:  ch.NotifyClose(make(chan *amqp091.Error, 1)),
	}, nil
}

// closeChannel closes pc in the background (channel.close waits for the
// broker's answer, which a dead connection never sends), draining its
// listeners so amqp091-go never blocks on them.
func (p *Publisher) closeChannel(pc *pubChannel) {
	go func() {
		for range pc.returns {
		}
	}()
	go func() { _ = pc.ch.Close() }()
}

// abandon stops using conn: the next Publish dials again, and conn is
// closed in the background. A confirmation that does not arrive within
// ConfirmTimeout means the connection is dead (half-open) or the broker is
// blocking publishers (a memory or disk alarm); in both cases a new
// connection is the way out, and amqp091-go's heartbeat would take longer to
// notice the first. Publish calls still waiting on conn fail with
// [ErrUnconfirmed].
func (p *Publisher) abandon(conn *amqp091.Connection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != conn {
		return
	}
	for _, pc := range p.idle {
		p.closeChannel(pc)
	}
	p.idle = nil
	p.conn = nil
	p.logger.Info("abandoning connection: no confirmation within ConfirmTimeout", nil)
	go func() { _ = conn.CloseDeadline(time.Now().Add(p.cfg.ConfirmTimeout)) }()
}

// fenceOff stops using pc's connection at once: its gate aborts it and
// refuses every publishing frame from now on, so that nothing a call on it
// still had to send reaches the broker; the next Publish dials again.
// Publish calls still on it fail with [ErrUnconfirmed] (retryable).
func (p *Publisher) fenceOff(pc *pubChannel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != pc.gate {
		pc.gate.Close() // the connection was dropped already
		return
	}
	p.fenceOffLocked()
}

// fenceOffLocked fences p.conn off (see fenceOff). p.mu is held.
func (p *Publisher) fenceOffLocked() {
	p.gate.Close()
	for _, pc := range p.idle {
		p.closeChannel(pc)
	}
	p.idle = nil
	p.logger.Info("publish abandoned: its connection is aborted, with what it had to send", nil)
	conn := p.conn
	p.conn, p.gate = nil, nil
	go func() { _ = conn.Close() }()
}

// classifyFrame reads the header of an AMQP 0-9-1 frame a client sends: a
// type, a channel, a payload size, the payload and a frame-end octet; or
// the protocol header ("AMQP" and four octets) that opens a connection.
// basic.publish methods and the content header and body frames that follow
// them publish.
func classifyFrame(b []byte) (length int, publishes bool, ok bool) {
	if len(b) < 7 {
		return 0, false, false
	}
	if string(b[:4]) == "AMQP" {
		return 8, false, true
	}
	size := binary.BigEndian.Uint32(b[3:7])
	length = 7 + int(size) + 1
	switch b[0] {
	case 1: // method: class and method ids open the payload
		if size < 4 {
			return length, false, true
		}
		if len(b) < 11 {
			return 0, false, false
		}
		class, method := binary.BigEndian.Uint16(b[7:]), binary.BigEndian.Uint16(b[9:])
		return length, class == 60 && method == 40, true // basic.publish
	case 2, 3: // content header, content body
		return length, true, true
	}
	return length, false, true
}

// declare declares topic's topology on ch, the same that [NewSubscriber]'s
// watermill-amqp subscriber declares: in ModeQueue the topic's queue; in
// ModePubSub the topic's exchange and the queues of Config.Groups.
func (p *Publisher) declare(ch *amqp091.Channel, topic string) error {
	if p.cfg.Mode == ModeQueue {
		wc := p.cfg.WatermillConfig("")
		return p.cfg.TopologyBuilder.BuildTopology(ch, wamqp.BuildTopologyParams{
			Topic:     topic,
			QueueName: p.cfg.queueName(topic, ""),
		}, wc, p.logger)
	}
	exchange := p.cfg.exchangeName(topic)
	if len(p.cfg.Groups) == 0 {
		return p.cfg.TopologyBuilder.ExchangeDeclare(ch, exchange, p.cfg.WatermillConfig(""))
	}
	for _, g := range p.cfg.Groups {
		wc := p.cfg.WatermillConfig(g)
		if err := p.cfg.TopologyBuilder.BuildTopology(ch, wamqp.BuildTopologyParams{
			Topic:        topic,
			QueueName:    p.cfg.queueName(topic, g),
			ExchangeName: exchange,
			RoutingKey:   wc.QueueBind.GenerateRoutingKey(topic),
		}, wc, p.logger); err != nil {
			return fmt.Errorf("group %q: %w", g, err)
		}
	}
	return nil
}

// release puts pc back in the idle pool when healthy, and closes it
// otherwise.
func (p *Publisher) release(pc *pubChannel, healthy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if healthy && !p.closed && pc.conn == p.conn && !pc.ch.IsClosed() && pc.closeError() == nil {
		p.idle = append(p.idle, pc)
		return
	}
	p.closeChannel(pc)
}

// forget makes the next Publish to topic declare its topology again.
func (p *Publisher) forget(pc *pubChannel, topic string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc.conn == p.conn {
		delete(p.declared, topic)
	}
}

// publish publishes pubs on pc in order, waits for their confirmations and
// returns one error per message, and whether it stopped waiting for
// confirmations because ctx ended. declared says whether the topology was
// declared for this call: a return is permanent only then; otherwise the
// topology declared earlier may be gone (a queue deleted, or expired by
// x-expires), and the retry declares it again.
func (p *Publisher) publish(ctx context.Context, pc *pubChannel, topic string, pubs []amqp091.Publishing, declared bool) (runtime.PublishErrors, bool) {
	exchange, key := p.cfg.exchangeName(topic), p.cfg.routingKey(topic)
	errs := make(runtime.PublishErrors, len(pubs))
	dcs := make([]*amqp091.DeferredConfirmation, len(pubs))
	// byID maps a message-id to the indexes of the messages that carry it
	// and are not yet matched to a return, in publish order (returns come
	// in publish order).
	byID := make(map[string][]int, len(pubs))
	returned := make([]*amqp091.Return, len(pubs))
	returns := pc.returns
	onReturn := func(r amqp091.Return, ok bool) {
		if !ok {
			returns = nil // the channel shut down
			return
		}
		idx := byID[r.MessageId]
		if len(idx) == 0 {
			p.logger.Error("unmatched basic.return", nil, watermill.LogFields{"topic": topic, "message_uuid": r.MessageId})
			return
		}
		byID[r.MessageId] = idx[1:]
		returned[idx[0]] = &r
	}
	drain := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				onReturn(r, ok)
			default:
				return
			}
		}
	}

	sent := 0
	for i, pub := range pubs {
		if ctx.Err() != nil {
			break
		}
		byID[pub.MessageId] = append(byID[pub.MessageId], i)
		dc, err := pc.ch.PublishWithDeferredConfirm(exchange, key, true, false, pub)
		if err != nil {
			errs[i] = fmt.Errorf("%w: %w", ErrUnconfirmed, err)
			break
		}
		dcs[i] = dc
		sent++
		drain()
	}

	timedOut := false
wait:
	for _, dc := range dcs[:sent] {
		for {
			select {
			case <-dc.Done():
				continue wait
			case r, ok := <-returns:
				onReturn(r, ok)
			case <-ctx.Done():
				timedOut = true
				break wait
			}
		}
	}
	// A return precedes the ack of its message, so every return of a
	// confirmed message is in the buffer by now.
	drain()

	closeErr := pc.closeError()
	tooLarge := -1
	if closeErr != nil {
		tooLarge = oversizeCulprit(closeErr, pubs, dcs)
	}
	anyReturned := false
	for i := range pubs {
		if errs[i] != nil {
			continue
		}
		dc := dcs[i]
		switch {
		case returned[i] != nil:
			r := returned[i]
			anyReturned = true
			errs[i] = &UnroutableError{
				Exchange: r.Exchange, RoutingKey: r.RoutingKey, MessageID: r.MessageId,
				ReplyCode: r.ReplyCode, ReplyText: r.ReplyText,
			}
			if declared {
				errs[i] = runtime.Permanent(errs[i])
			}
		case i == tooLarge:
			errs[i] = runtime.Permanent(fmt.Errorf("%w: %d bytes: %s", ErrMessageTooLarge, len(pubs[i].Body), closeErr.Reason))
		case dc == nil:
			errs[i] = fmt.Errorf("%w: not sent: %w", ErrUnconfirmed, unsentCause(ctx, closeErr))
		case dc.Acked():
			// confirmed
		case !isDone(dc):
			errs[i] = fmt.Errorf("%w: %w", ErrUnconfirmed, context.Cause(ctx))
		case closeErr != nil || pc.ch.IsClosed():
			errs[i] = fmt.Errorf("%w: channel closed: %w", ErrUnconfirmed, unsentCause(ctx, closeErr))
		default:
			errs[i] = fmt.Errorf("%w (exchange %q, routing key %q)", ErrNacked, exchange, key)
		}
	}
	if anyReturned {
		// A queue or binding was deleted behind the publisher's back, or
		// (ModePubSub) no group has a queue yet: declare again next time.
		p.forget(pc, topic)
	}
	return errs, timedOut
}

// unsentCause explains why a message was not sent or not confirmed.
func unsentCause(ctx context.Context, closeErr *amqp091.Error) error {
	if closeErr != nil {
		return closeErr
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return amqp091.ErrClosed
}

func isDone(dc *amqp091.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// oversizeRE matches RabbitMQ's reason for closing a channel on a message
// larger than max_message_size.
var oversizeRE = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// oversizeCulprit returns the index of the message that made the broker
// close the channel for exceeding max_message_size: the first unconfirmed
// message of the reported size, or else the first unconfirmed one larger
// than the limit; -1 if the close was for another reason.
func oversizeCulprit(closeErr *amqp091.Error, pubs []amqp091.Publishing, dcs []*amqp091.DeferredConfirmation) int {
	if closeErr.Code != amqp091.PreconditionFailed {
		return -1
	}
	m := oversizeRE.FindStringSubmatch(closeErr.Reason)
	if m == nil {
		return -1
	}
	size, err1 := strconv.Atoi(m[1])
	limit, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil {
		return -1
	}
	unconfirmed := func(i int) bool { return dcs[i] != nil && !dcs[i].Acked() }
	for i := range pubs {
		if unconfirmed(i) && len(pubs[i].Body) == size {
			return i
		}
	}
	for i := range pubs {
		if unconfirmed(i) && len(pubs[i].Body) > limit {
			return i
		}
	}
	return -1
}

// Close waits for in-flight Publish calls, then closes the connection. It is
// safe to call more than once and concurrently; calls after the first
// return nil at once. Publish calls made after Close return
// [ErrPublisherClosed].
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.inflight.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.idle {
		p.closeChannel(pc)
	}
	p.idle = nil
	if p.conn == nil || p.conn.IsClosed() {
		return nil
	}
	if err := p.conn.CloseDeadline(time.Now().Add(p.cfg.ConfirmTimeout)); err != nil && !errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("amqp: close connection: %w", err)
	}
	return nil
}

// transient reports whether a publish error is the broker's or the
// connection's rather than the message's: a message not confirmed
// (ErrUnconfirmed: the channel or connection closed, a timeout) or nacked
// (ErrNacked), a closed connection, a network error, or a connection
// closed by the broker with connection-forced (320), resource-error (506)
// or internal-error (541).
func transient(err error) bool {
	if errors.Is(err, ErrUnconfirmed) || errors.Is(err, ErrNacked) || errors.Is(err, amqp091.ErrClosed) || publishing.ConnectionLost(err) {
		return true
	}
	var aerr *amqp091.Error
	return errors.As(err, &aerr) && (aerr.Code == amqp091.ConnectionForced || aerr.Code == amqp091.ResourceError || aerr.Code == amqp091.InternalError)
}
