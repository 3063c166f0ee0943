package servicebus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
)

// MaxSessionID is the longest session id Service Bus takes, in characters.
const MaxSessionID = 128

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// Client opens the senders: SDKClient{C: client} for an
	// *azservicebus.Client (see [NewSDKClient]), or a fake. Required.
	Client Client

	// MaxBatchBytes caps a batch below the link's own limit, which the
	// SDK reads when it opens the link (256 KiB on the Standard tier, 1 MB
	// on Premium). A message larger than a batch may be is sent on its
	// own, up to the entity's message limit.
	//
	// Default: 0, the link's limit.
	MaxBatchBytes uint64

	// Logger receives a warning per failed send.
	//
	// Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports a missing setting, wrapping [ErrInvalidConfig].
func (c PublisherConfig) Validate() error {
	if c.Client == nil {
		return fmt.Errorf("%w: Client is required", ErrInvalidConfig)
	}
	return nil
}

// Publisher publishes Watermill messages to Service Bus queues and topics
// (the Watermill topic names the entity). It is safe for concurrent use.
//
// Each message is one Service Bus message: the aggregate id is its
// SessionID, so that a session-enabled queue or subscription hands each
// aggregate's messages out in order to one receiver at a time; the event
// id is its MessageID, for the entity's duplicate detection; the event
// type is its Subject; the metadata are its application properties and
// the payload its body.
//
// A Publish call sends its messages in the SDK's batches, filled up to the
// entity's size limit, one batch at a time, in order; a batch is accepted
// or refused whole. When one fails, it and every later message fail with
// it, retryably (an outage, missing credentials or a missing entity: an
// operator fixes them, nothing is lost). A message too large for a batch
// of its own is sent alone; one Service Bus refuses for its size fails
// alone, for good ([ErrMessageTooLarge]), as does one
// whose aggregate id cannot be a session id; the later messages of its
// aggregate are then not sent (retryably), so that none overtakes it. The
// errors are reported per message in a runtime.PublishErrors.
type Publisher struct {
	cfg PublisherConfig
	log *slog.Logger

	mu      sync.Mutex
	senders map[string]Sender
	closed  bool
}

// NewPublisher returns a Publisher for cfg; it opens senders as topics are
// published to.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Publisher{cfg: cfg, log: cfg.Logger.With("component", "servicebus_publisher"), senders: map[string]Sender{}}, nil
}

// sender returns the entity's sender, opening it the first time.
func (p *Publisher) sender(entity string) (Sender, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPublisherClosed
	}
	if s := p.senders[entity]; s != nil {
		return s, nil
	}
	s, err := p.cfg.Client.NewSender(entity)
	if err != nil {
		return nil, fmt.Errorf("servicebus: sender for %q: %w", entity, err)
	}
	p.senders[entity] = s
	return s, nil
}

// errEarlierFailed is the error of a message not sent because an earlier
// message of its aggregate failed in the same call.
var errEarlierFailed = errors.New("servicebus: not sent: an earlier message of its aggregate failed")

// Publish sends msgs to the queue or topic named topic (see [Publisher]).
// The sends run under the first message's context (the relay sets its
// batch's deadline there).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s, err := p.sender(topic)
	if err != nil {
		if errors.Is(err, ErrPublisherClosed) {
			return err
		}
		return runtime.Transient(err)
	}
	ctx := msgs[0].Context()
	errs := make(runtime.PublishErrors, len(msgs))
	failedAggs := map[string]bool{}
	var batch Batch
	var inBatch []int
	failed := false
	send := func() error {
		if batch == nil || len(inBatch) == 0 {
			return nil
		}
		err := s.SendMessageBatch(ctx, batch, nil)
		if err != nil {
			return classify(err)
		}
		batch, inBatch = nil, inBatch[:0]
		return nil
	}
	newBatch := func() error {
		var opts *azservicebus.MessageBatchOptions
		if p.cfg.MaxBatchBytes > 0 {
			opts = &azservicebus.MessageBatchOptions{MaxBytes: p.cfg.MaxBatchBytes}
		}
		b, err := s.NewMessageBatch(ctx, opts)
		if err != nil {
			return classify(err)
		}
		batch = b
		return nil
	}
	fail := func(from int, err error) error {
		for _, i := range inBatch {
			errs[i] = err
		}
		for i := from; i < len(msgs); i++ {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		p.log.Warn("servicebus: send failed", "entity", topic, "messages", len(msgs)-from+len(inBatch), "error", err)
		return fmt.Errorf("servicebus: publish to %s: %w", topic, errs)
	}
	for i, m := range msgs {
		agg := aggregateKey(m)
		if failedAggs[agg] {
			errs[i], failed = runtime.Transient(fmt.Errorf("%w (message %s)", errEarlierFailed, m.UUID)), true
			continue
		}
		sm, err := toServiceBus(m)
		if err != nil {
			errs[i], failed, failedAggs[agg] = err, true, true
			continue
		}
		if batch == nil {
			if err := newBatch(); err != nil {
				return fail(i, err)
			}
		}
		err = batch.AddMessage(sm, nil)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) && len(inBatch) > 0 {
			if err := send(); err != nil {
				return fail(i, err)
			}
			if err := newBatch(); err != nil {
				return fail(i, err)
			}
			err = batch.AddMessage(sm, nil)
		}
		switch {
		case errors.Is(err, azservicebus.ErrMessageTooLarge):
			// Larger than a batch may be (the link's limit, or
			// MaxBatchBytes), maybe not than a message may: send it on
			// its own, after the batch before it, and let Service Bus
			// say.
			if err := send(); err != nil {
				return fail(i, err)
			}
			if err := s.SendMessage(ctx, sm, nil); err != nil {
				if isTooLarge(err) {
					errs[i] = runtime.Permanent(fmt.Errorf("%w: message %s (%d bytes of payload): %w", ErrMessageTooLarge, m.UUID, len(m.Payload), err))
					failed, failedAggs[agg] = true, true
					continue
				}
				return fail(i, classify(err))
			}
			continue
		case err != nil:
			errs[i] = runtime.Permanent(fmt.Errorf("servicebus: message %s: %w", m.UUID, err))
			failed, failedAggs[agg] = true, true
			continue
		}
		inBatch = append(inBatch, i)
	}
	if err := send(); err != nil {
		return fail(len(msgs), err)
	}
	if failed {
		return fmt.Errorf("servicebus: publish to %s: %w", topic, errs)
	}
	return nil
}

// isTooLarge reports whether Service Bus refused a message for its size
// (AMQP amqp:link:message-size-exceeded, or the SDK's own check).
func isTooLarge(err error) bool {
	return errors.Is(err, azservicebus.ErrMessageTooLarge) || strings.Contains(err.Error(), "message-size-exceeded")
}

// aggregateKey is the message's aggregate, for holding its later messages
// back behind a failed one ("" for a message without one: its own).
func aggregateKey(m *message.Message) string {
	typ, id := runtime.AggregateOf(m.Metadata)
	if id == "" {
		return "\x00" + m.UUID
	}
	return typ + "\x00" + id
}

// toServiceBus maps a Watermill message (see [Publisher]).
func toServiceBus(m *message.Message) (*azservicebus.Message, error) {
	_, session := runtime.AggregateOf(m.Metadata)
	if session == "" {
		session = m.UUID // no aggregate: no order to keep
	}
	if utf8.RuneCountInString(session) > MaxSessionID {
		return nil, runtime.Permanent(fmt.Errorf("%w: message %s: aggregate id of %d characters, more than %d", ErrInvalidSessionID, m.UUID, utf8.RuneCountInString(session), MaxSessionID))
	}
	props := make(map[string]any, len(m.Metadata))
	for k, v := range m.Metadata {
		props[k] = v
	}
	sm := &azservicebus.Message{
		MessageID:             &m.UUID,
		SessionID:             &session,
		Body:                  m.Payload,
		ApplicationProperties: props,
	}
	if t := m.Metadata.Get(runtime.MetadataEventType); t != "" {
		sm.Subject = &t
	}
	if json.Valid(m.Payload) {
		ct := "application/json"
		sm.ContentType = &ct
	}
	return sm, nil
}

// classify classes the error of a whole batch or of opening one: retryable
// (an outage, credentials, a missing entity, a timeout: an operator or
// time fixes them, and nothing in the batch is one message's fault).
func classify(err error) error {
	if c := code(err); c != "" {
		return runtime.Transient(fmt.Errorf("servicebus: %s: %w", c, err))
	}
	return runtime.Transient(fmt.Errorf("servicebus: %w", err))
}

// Close closes the senders.
func (p *Publisher) Close() error {
	p.mu.Lock()
	senders := p.senders
	p.senders, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, s := range senders {
		if err := s.Close(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
