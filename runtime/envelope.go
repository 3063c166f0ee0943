package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Metadata keys of the wire contract (the native metadata). Adapters map
// them to broker headers (Kafka record headers, AMQP headers, ...)
// unchanged. [CloudEvents] describes the alternative CloudEvents metadata.
const (
	MetadataEventID       = "event_id"
	MetadataEventType     = "event_type"
	MetadataEventVersion  = "event_version"
	MetadataAggregateType = "aggregate_type"
	MetadataAggregateID   = "aggregate_id"
	MetadataOccurredAt    = "occurred_at"
	MetadataCorrelationID = "correlation_id"
	// MetadataTraceParent and MetadataTraceState are the W3C Trace Context
	// headers, so OpenTelemetry propagators read them without translation.
	MetadataTraceParent = "traceparent"
	MetadataTraceState  = "tracestate"
	// MetadataMinReaderVersion, a header, is the oldest schema version of
	// the event type whose reader decodes this payload directly. Events
	// generated for a forward-compatible version set it (see [Event]); a
	// consumer whose latest known version is at least this value decodes
	// the payload although its version is newer (see
	// [Registry.DecodeEnvelope]). Absent, the payload needs a reader of its
	// own version.
	MetadataMinReaderVersion = "min_reader_version"
)

// Envelope is an event on its way to the broker: the payload plus everything a
// consumer needs to route, decode and deduplicate it.
type Envelope struct {
	// EventID is unique per recorded event (UUIDv7, so ids sort by time) and
	// survives retries and redeliveries: consumers deduplicate on it.
	EventID uuid.UUID
	// EventType and EventVersion select the decoder (see [Key]).
	EventType    string
	EventVersion int
	// AggregateType and AggregateID name the aggregate that recorded the
	// event. The aggregate id is the Kafka key.
	AggregateType string
	AggregateID   string
	// OccurredAt is the event's own timestamp ([Event.EventTime]).
	OccurredAt time.Time
	// Headers holds the correlation id, W3C trace context and any other
	// string headers; it may be nil.
	Headers map[string]string
	// Payload is the event's JSON encoding.
	Payload json.RawMessage
}

// Key returns the envelope's (type, version).
func (e Envelope) Key() Key { return Key{Type: e.EventType, Version: e.EventVersion} }

// NewEnvelope validates and marshals evt into an envelope with the given id
// and aggregate, taking headers from ctx (see [HeadersFromContext]). When evt
// has a method EventMinReader() int (generated events do) reporting a version
// older than its own, the header [MetadataMinReaderVersion] carries it.
//
// It returns an [*EncodeError] when the event fails [Event.Validate] or cannot
// be marshalled (NaN, channels, ...), and an error wrapping
// [ErrInvalidEnvelope] when the id or the aggregate is missing.
func NewEnvelope(ctx context.Context, id uuid.UUID, evt Event, aggregateType, aggregateID string) (Envelope, error) {
	if evt == nil {
		return Envelope{}, fmt.Errorf("%w: nil event", ErrInvalidEnvelope)
	}
	key := evt.EventKey()
	switch {
	case key.Type == "":
		return Envelope{}, fmt.Errorf("%w: event %T has an empty type", ErrInvalidEnvelope, evt)
	case key.Version < 1:
		return Envelope{}, fmt.Errorf("%w: event %s: version must be >= 1", ErrInvalidEnvelope, key)
	case id == uuid.Nil:
		return Envelope{}, fmt.Errorf("%w: event %s: nil event id", ErrInvalidEnvelope, key)
	case aggregateType == "":
		return Envelope{}, fmt.Errorf("%w: event %s: empty aggregate type", ErrInvalidEnvelope, key)
	case aggregateID == "":
		return Envelope{}, fmt.Errorf("%w: event %s: empty aggregate id (save the aggregate first or implement AggregateID)", ErrInvalidEnvelope, key)
	}
	if err := evt.Validate(); err != nil {
		return Envelope{}, &EncodeError{Key: key, Err: err}
	}
	payload, err := json.Marshal(evt)
	if err != nil {
		return Envelope{}, &EncodeError{Key: key, Err: err}
	}
	headers := HeadersFromContext(ctx)
	if m, ok := evt.(interface{ EventMinReader() int }); ok {
		if v := m.EventMinReader(); v >= 1 && v < key.Version {
			if headers == nil {
				headers = make(map[string]string, 1)
			}
			headers[MetadataMinReaderVersion] = strconv.Itoa(v)
		}
	}
	return Envelope{
		EventID:       id,
		EventType:     key.Type,
		EventVersion:  key.Version,
		AggregateType: aggregateType,
		AggregateID:   aggregateID,
		OccurredAt:    OccurredAt(evt.EventTime()),
		Headers:       headers,
		Payload:       payload,
	}, nil
}

// Metadata returns the envelope's wire metadata: the contract keys plus every
// header. Contract keys win over headers of the same name.
func (e Envelope) Metadata() map[string]string {
	md := make(map[string]string, 6+len(e.Headers))
	for k, v := range e.Headers {
		md[k] = v
	}
	md[MetadataEventID] = e.EventID.String()
	md[MetadataEventType] = e.EventType
	md[MetadataEventVersion] = strconv.Itoa(e.EventVersion)
	md[MetadataAggregateType] = e.AggregateType
	md[MetadataAggregateID] = e.AggregateID
	md[MetadataOccurredAt] = e.OccurredAt.UTC().Format(time.RFC3339Nano)
	return md
}

// EnvelopeFromMetadata rebuilds an envelope from a received message: its
// UUID, metadata and payload. Metadata that is not part of the contract
// becomes Headers. A missing or malformed contract key (event_type,
// event_version, aggregate_type, aggregate_id, occurred_at) is an error
// wrapping [ErrInvalidEnvelope] that names the key; without event_id the
// message UUID is the event id (the relay sets both to the same value).
//
// Metadata without an event_type key but with CloudEvents attributes (a
// specversion under any binding prefix: ce_, ce-, cloudEvents:,
// cloudEvents_) is read as a CloudEvent in binary content mode, mapped as
// the table on [CloudEvents] shows: id, source, specversion and type are
// required. The event version is the eventversion extension attribute or,
// without it, the payload's event_version. An id that is not a UUID (other
// producers' ids are any string) becomes a name-based UUID (version 5, URL
// namespace) of source "#" id, stable across redeliveries. Attributes that
// are not envelope fields (source, dataschema, ...) stay in Headers under
// their metadata keys.
func EnvelopeFromMetadata(messageUUID string, md map[string]string, payload []byte) (Envelope, error) {
	if md[MetadataEventType] == "" {
		if p := cloudEventsPrefix(md); p != "" {
			return envelopeFromCloudEvent(p, md, payload)
		}
	}
	idText := md[MetadataEventID]
	if idText == "" {
		idText = messageUUID
	}
	id, err := uuid.Parse(idText)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: %s %q: %v", ErrInvalidEnvelope, MetadataEventID, idText, err)
	}
	env := Envelope{
		EventID:       id,
		EventType:     md[MetadataEventType],
		AggregateType: md[MetadataAggregateType],
		AggregateID:   md[MetadataAggregateID],
		Payload:       json.RawMessage(payload),
	}
	for _, k := range []string{MetadataEventType, MetadataEventVersion, MetadataAggregateType, MetadataAggregateID, MetadataOccurredAt} {
		if md[k] == "" {
			return Envelope{}, fmt.Errorf("%w: missing %s", ErrInvalidEnvelope, k)
		}
	}
	if env.EventVersion, err = strconv.Atoi(md[MetadataEventVersion]); err != nil || env.EventVersion < 1 {
		return Envelope{}, fmt.Errorf("%w: %s %q is not a positive integer", ErrInvalidEnvelope, MetadataEventVersion, md[MetadataEventVersion])
	}
	s := md[MetadataOccurredAt]
	if env.OccurredAt, err = time.Parse(time.RFC3339Nano, s); err != nil {
		return Envelope{}, fmt.Errorf("%w: %s %q: %v", ErrInvalidEnvelope, MetadataOccurredAt, s, err)
	}
	for k, v := range md {
		switch k {
		case MetadataEventID, MetadataEventType, MetadataEventVersion, MetadataAggregateType,
			MetadataAggregateID, MetadataOccurredAt:
			continue
		}
		if env.Headers == nil {
			env.Headers = make(map[string]string)
		}
		env.Headers[k] = v
	}
	return env, nil
}

// OutboxMessage is one row of the outbox table: an [Envelope] with its place
// in the outbox and its destination topic.
type OutboxMessage struct {
	// ID is the row's position in the outbox; the relay publishes pending rows
	// in ID order, which is commit order for one aggregate.
	ID int64
	// Topic is the destination topic, fixed when the row is written.
	Topic string
	Envelope
	// CreatedAt is when the row was written (database clock).
	CreatedAt time.Time
	// Attempts counts failed publish attempts so far.
	Attempts int
}

type contextKey int

const (
	correlationIDKey contextKey = iota
	traceParentKey
	traceStateKey
)

// WithCorrelationID returns a copy of ctx carrying a correlation id, which
// events written under ctx carry as [MetadataCorrelationID].
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationIDKey, id)
}

// CorrelationID returns the correlation id carried by ctx, or "".
func CorrelationID(ctx context.Context) string {
	s, _ := ctx.Value(correlationIDKey).(string)
	return s
}

// WithTraceContext returns a copy of ctx carrying a W3C traceparent (and
// optionally tracestate), which events written under ctx carry as
// [MetadataTraceParent] and [MetadataTraceState]. Applications using
// OpenTelemetry usually inject headers through the hooks' Headers function
// instead.
func WithTraceContext(ctx context.Context, traceParent, traceState string) context.Context {
	ctx = context.WithValue(ctx, traceParentKey, traceParent)
	if traceState != "" {
		ctx = context.WithValue(ctx, traceStateKey, traceState)
	}
	return ctx
}

// HeadersFromContext returns the headers carried by ctx (correlation id and
// trace context), or nil when it carries none.
func HeadersFromContext(ctx context.Context) map[string]string {
	if ctx == nil {
		return nil
	}
	var h map[string]string
	set := func(k string, v any) {
		if s, _ := v.(string); s != "" {
			if h == nil {
				h = make(map[string]string, 3)
			}
			h[k] = s
		}
	}
	set(MetadataCorrelationID, ctx.Value(correlationIDKey))
	set(MetadataTraceParent, ctx.Value(traceParentKey))
	set(MetadataTraceState, ctx.Value(traceStateKey))
	return h
}
