package eventbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"

	"github.com/gooutbox/outbox/runtime"
)

// PutEvents' limits.
const (
	// MaxEntries is the most entries one PutEvents request takes.
	MaxEntries = 10
	// MaxRequestSize is what the entries of one PutEvents request must
	// add up to less than, counted as EventBridge counts them (see
	// [EntrySize]); a single entry too.
	MaxRequestSize = 256 * 1024
)

// API is the part of *eventbridge.Client this package uses.
// [PublisherConfig.Client] takes any implementation, for wrapping or faking
// the client.
type API interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

var _ API = (*eventbridge.Client)(nil)

// DetailFormat says what an entry's Detail holds.
type DetailFormat int

const (
	// DetailEnvelope, the default, is a JSON object with the event's
	// identity beside its payload, so that a rule matches on any of them
	// and a target de-duplicates by id:
	//
	//	{"id": "<event id>", "type": "orders.order_paid", "version": 2,
	//	 "aggregate_type": "order", "aggregate_id": "42",
	//	 "occurred_at": "2026-12-01T10:00:00Z", "topic": "order",
	//	 "metadata": {...every metadata key...}, "data": {...the payload...}}
	//
	// A payload that is not JSON goes in "data_base64" instead of "data".
	DetailEnvelope DetailFormat = iota
	// DetailPayload is the payload as it is, which must be a JSON object
	// (EventBridge refuses anything else; Publish reports such a message
	// as permanent). The event id and the metadata are not carried.
	DetailPayload
)

// PublisherConfig configures a [Publisher]. The zero value publishes to the
// account's default event bus, in the region and with the credentials of
// the AWS SDK's default configuration chain.
type PublisherConfig struct {
	// EventBus is the event bus's name or ARN.
	//
	// Default: "default", the account's default event bus.
	EventBus string

	// Source returns an entry's Source, which rules match on
	// (`"source": ["order"]`).
	//
	// Default: the topic (in the outbox, the aggregate type).
	Source func(topic string, msg *message.Message) string

	// DetailType returns an entry's DetailType.
	//
	// Default: the event type (runtime.MetadataEventType), or the topic
	// for a message without one.
	DetailType func(topic string, msg *message.Message) string

	// Detail is what an entry's Detail holds.
	//
	// Default: DetailEnvelope.
	Detail DetailFormat

	// Region is the AWS region, for example "eu-west-1".
	//
	// Default: the region of the default chain (AWS_REGION, the shared
	// config file); "us-east-1" when Endpoint is set and the chain names
	// none, since emulators accept any region.
	Region string

	// Endpoint overrides the service endpoint, for an emulator such as
	// LocalStack or package eventbridgetest: "http://127.0.0.1:4566".
	//
	// Default: "" (the AWS endpoint of Region).
	Endpoint string

	// AWSConfig, when set, is used instead of loading the default chain.
	// Region and Endpoint above still override its region and endpoint.
	//
	// Default: nil (load the default chain).
	AWSConfig *aws.Config

	// Client, when set, is used as it is and none of Region, Endpoint and
	// AWSConfig applies: the escape hatch for a client built elsewhere, or
	// a fake.
	Client API

	// Logger receives a warning per failed entry.
	//
	// Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports a setting out of range, wrapping [ErrInvalidConfig].
func (c PublisherConfig) Validate() error {
	switch {
	case c.Detail != DetailEnvelope && c.Detail != DetailPayload:
		return fmt.Errorf("%w: Detail %d: want DetailEnvelope or DetailPayload", ErrInvalidConfig, c.Detail)
	}
	return nil
}

// Publisher publishes Watermill messages as EventBridge events with
// PutEvents. It is safe for concurrent use.
//
// A Publish call sends its messages in PutEvents requests of at most
// [MaxEntries] entries and [MaxRequestSize] bytes, one request at a time,
// in order. EventBridge answers per entry: the messages it refused are
// reported in a [runtime.PublishErrors] (wrapped), each permanent when
// the entry itself is at fault (malformed detail, an argument EventBridge
// refuses, too large) and retryable otherwise (throttling, an internal
// failure); the others were accepted. A failure of the whole request
// (network, credentials, a missing bus) fails every message not yet
// accepted, retryably.
//
// EventBridge keeps no order, not even within a request: consumers that
// need each aggregate's events in order route them to an SQS FIFO queue
// with the aggregate id as message group (see the package documentation).
type Publisher struct {
	cfg    PublisherConfig
	client API
	log    *slog.Logger

	mu     sync.Mutex
	closed bool
}

// NewPublisher returns a Publisher for cfg. Without cfg.Client it loads
// the AWS configuration (no request is sent).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EventBus == "" {
		cfg.EventBus = "default"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client := cfg.Client
	if client == nil {
		var awsCfg aws.Config
		if cfg.AWSConfig != nil {
			awsCfg = cfg.AWSConfig.Copy()
		} else {
			var err error
			if awsCfg, err = awsconfig.LoadDefaultConfig(context.Background()); err != nil {
				return nil, fmt.Errorf("eventbridge: load AWS config: %w", err)
			}
		}
		if cfg.Region != "" {
			awsCfg.Region = cfg.Region
		}
		if awsCfg.Region == "" && cfg.Endpoint != "" {
			awsCfg.Region = "us-east-1"
		}
		if awsCfg.Region == "" {
			return nil, fmt.Errorf("%w: no Region, and the default AWS config chain names none (set AWS_REGION)", ErrInvalidConfig)
		}
		client = eventbridge.NewFromConfig(awsCfg, func(o *eventbridge.Options) {
			if cfg.Endpoint != "" {
				o.BaseEndpoint = aws.String(cfg.Endpoint)
			}
		})
	}
	return &Publisher{cfg: cfg, client: client, log: cfg.Logger.With("component", "eventbridge_publisher", "event_bus", cfg.EventBus)}, nil
}

// EntrySize is the size of an entry as EventBridge counts it against
// [MaxRequestSize]: 14 bytes for the time, if set, and the UTF-8 bytes of
// Source, DetailType, Detail and each resource.
func EntrySize(e types.PutEventsRequestEntry) int {
	n := 0
	if e.Time != nil {
		n += 14
	}
	n += len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail))
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}

// Publish sends msgs to the event bus (see [Publisher]). The request's
// context is the first message's (the relay sets its batch's deadline
// there).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx := msgs[0].Context()
	errs := make(runtime.PublishErrors, len(msgs))
	failed := false
	var batch []queued
	size := 0
	send := func() error {
		if len(batch) == 0 {
			return nil
		}
		entries := make([]types.PutEventsRequestEntry, len(batch))
		for j, b := range batch {
			entries[j] = b.entry
		}
		out, err := p.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		if err != nil {
			return classifyCall(err)
		}
		if len(out.Entries) != len(entries) {
			return runtime.Transient(fmt.Errorf("eventbridge: PutEvents answered %d entries for %d", len(out.Entries), len(entries)))
		}
		for j, r := range out.Entries {
			if r.ErrorCode == nil {
				continue
			}
			i := batch[j].i
			errs[i] = entryError(aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage), msgs[i])
			failed = true
			p.log.Warn("eventbridge: entry refused", "event_id", msgs[i].UUID, "error_code", aws.ToString(r.ErrorCode), "error", aws.ToString(r.ErrorMessage))
		}
		batch, size = batch[:0], 0
		return nil
	}
	for i, m := range msgs {
		entry, err := p.entry(topic, m)
		if err != nil {
			errs[i], failed = err, true
			continue
		}
		n := EntrySize(entry)
		if n >= MaxRequestSize { // "must be less than 256KB"
			errs[i], failed = runtime.Permanent(fmt.Errorf("%w: event %s is %d bytes as EventBridge counts it, %d or more", ErrMessageTooLarge, m.UUID, n, MaxRequestSize)), true
			continue
		}
		if len(batch) == MaxEntries || size+n >= MaxRequestSize {
			if err := send(); err != nil {
				return p.failRest(errs, msgs, batch, i, err)
			}
		}
		batch = append(batch, queued{i, entry})
		size += n
	}
	if err := send(); err != nil {
		return p.failRest(errs, msgs, batch, len(msgs), err)
	}
	if failed {
		return fmt.Errorf("eventbridge: publish to %s: %w", p.cfg.EventBus, errs)
	}
	return nil
}

// queued is an entry of the request being built, and its message's index.
type queued struct {
	i     int
	entry types.PutEventsRequestEntry
}

// failRest records err for the messages of the request that failed and for
// every message after them not yet sent, and returns the call's error.
func (p *Publisher) failRest(errs runtime.PublishErrors, msgs []*message.Message, batch []queued, next int, err error) error {
	for _, b := range batch {
		errs[b.i] = err
	}
	for i := next; i < len(msgs); i++ {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return fmt.Errorf("eventbridge: publish to %s: %w", p.cfg.EventBus, errs)
}

// entry maps a message to a PutEvents entry.
func (p *Publisher) entry(topic string, m *message.Message) (types.PutEventsRequestEntry, error) {
	source := topic
	if p.cfg.Source != nil {
		source = p.cfg.Source(topic, m)
	}
	detailType := m.Metadata.Get(runtime.MetadataEventType)
	if detailType == "" {
		detailType = topic
	}
	if p.cfg.DetailType != nil {
		detailType = p.cfg.DetailType(topic, m)
	}
	if source == "" || detailType == "" {
		return types.PutEventsRequestEntry{}, runtime.Permanent(fmt.Errorf("eventbridge: event %s: empty Source or DetailType (topic %q)", m.UUID, topic))
	}
	var detail []byte
	switch p.cfg.Detail {
	case DetailPayload:
		if !json.Valid(m.Payload) || len(m.Payload) == 0 || firstNonSpace(m.Payload) != '{' {
			return types.PutEventsRequestEntry{}, runtime.Permanent(fmt.Errorf("eventbridge: event %s: DetailPayload needs a JSON object payload", m.UUID))
		}
		detail = m.Payload
	default:
		var err error
		if detail, err = envelopeDetail(topic, m); err != nil {
			return types.PutEventsRequestEntry{}, runtime.Permanent(fmt.Errorf("eventbridge: event %s: detail: %w", m.UUID, err))
		}
	}
	if !utf8.Valid(detail) {
		return types.PutEventsRequestEntry{}, runtime.Permanent(fmt.Errorf("eventbridge: event %s: the detail is not UTF-8", m.UUID))
	}
	e := types.PutEventsRequestEntry{
		EventBusName: aws.String(p.cfg.EventBus),
		Source:       aws.String(source),
		DetailType:   aws.String(detailType),
		Detail:       aws.String(string(detail)),
	}
	if at, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(runtime.MetadataOccurredAt)); err == nil {
		e.Time = aws.Time(at)
	}
	return e, nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// detailEnvelope is DetailEnvelope's JSON.
type detailEnvelope struct {
	ID            string            `json:"id"`
	Type          string            `json:"type,omitempty"`
	Version       int               `json:"version,omitempty"`
	AggregateType string            `json:"aggregate_type,omitempty"`
	AggregateID   string            `json:"aggregate_id,omitempty"`
	OccurredAt    string            `json:"occurred_at,omitempty"`
	Topic         string            `json:"topic"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Data          json.RawMessage   `json:"data,omitempty"`
	DataBase64    []byte            `json:"data_base64,omitempty"`
}

func envelopeDetail(topic string, m *message.Message) ([]byte, error) {
	id := m.Metadata.Get(runtime.MetadataEventID)
	if id == "" {
		id = m.UUID
	}
	aggType, aggID := runtime.AggregateOf(m.Metadata)
	d := detailEnvelope{
		ID: id, Type: m.Metadata.Get(runtime.MetadataEventType), AggregateType: aggType, AggregateID: aggID,
		OccurredAt: m.Metadata.Get(runtime.MetadataOccurredAt), Topic: topic, Metadata: m.Metadata,
	}
	if v, err := strconv.Atoi(m.Metadata.Get(runtime.MetadataEventVersion)); err == nil {
		d.Version = v
	}
	if len(m.Payload) > 0 && json.Valid(m.Payload) {
		d.Data = json.RawMessage(m.Payload)
	} else if len(m.Payload) > 0 {
		d.DataBase64 = m.Payload
	}
	return json.Marshal(d)
}

// permanentCodes are the entry error codes that the entry itself causes:
// sending it again fails again. Every other code (throttling, internal
// failures, and codes this package does not know) is retried.
var permanentCodes = map[string]bool{
	"MalformedDetail":              true,
	"InvalidArgument":              true,
	"ValidationException":          true,
	"InvalidEventPatternException": true,
	"EventTooLarge":                true,
}

// entryError is the error of an entry EventBridge refused.
func entryError(code, msg string, m *message.Message) error {
	err := fmt.Errorf("eventbridge: event %s refused: %s: %s", m.UUID, code, msg)
	if permanentCodes[code] {
		return runtime.Permanent(err)
	}
	return runtime.Transient(err)
}

// classifyCall classes the error of a whole PutEvents call: retryable,
// since nothing in it is one message's fault (the entries are checked
// before sending), and an operator fixes the rest (a missing bus, the
// credentials or the permissions) without losing anything.
func classifyCall(err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return runtime.Transient(fmt.Errorf("eventbridge: PutEvents: %s: %w", apiErr.ErrorCode(), err))
	}
	return runtime.Transient(fmt.Errorf("eventbridge: PutEvents: %w", err))
}

// Close marks the publisher closed; the client holds nothing to release.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}
