package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// CloudEvents 1.0 binary content mode: the payload is the event data as is,
// and the context attributes travel as message metadata, each named by a
// protocol binding's prefix and the attribute name. [CloudEvents.Metadata]
// writes them; [EnvelopeFromMetadata] reads them.
const (
	// CloudEventsSpecVersion is the specversion attribute written and the
	// major version read (1.x).
	CloudEventsSpecVersion = "1.0"

	// CloudEventsPrefixKafka is the attribute prefix of the Kafka protocol
	// binding (ce_id, ce_type, ...), the default of [CloudEvents.Prefix].
	CloudEventsPrefixKafka = "ce_"
	// CloudEventsPrefixHTTP is the prefix of the HTTP and NATS bindings
	// (ce-id, ...).
	CloudEventsPrefixHTTP = "ce-"
	// CloudEventsPrefixAMQP is the prefix of the AMQP binding
	// (cloudEvents:id, ...); CloudEventsPrefixAMQPJMS is its variant for
	// JMS 2.0 clients (cloudEvents_id, ...).
	CloudEventsPrefixAMQP    = "cloudEvents:"
	CloudEventsPrefixAMQPJMS = "cloudEvents_"

	// MetadataContentType carries the datacontenttype attribute
	// ("application/json"): every binding maps it to the protocol's own
	// content type, never to a prefixed attribute.
	MetadataContentType = "content-type"
)

// CloudEvents attribute names: the spec's required and optional attributes
// the mapping uses, and the extension attributes it defines. Metadata keys
// are a prefix (see [CloudEventsPrefixKafka]) followed by the name.
const (
	CEID          = "id"
	CESource      = "source"
	CESpecVersion = "specversion"
	CEType        = "type"
	CETime        = "time"
	CEDataSchema  = "dataschema"
	// CEPartitionKey (the Partitioning extension) carries the aggregate id;
	// the Kafka binding maps it to the record key, as adapters/kafka does.
	CEPartitionKey = "partitionkey"
	// CEEventVersion carries the event's schema version.
	CEEventVersion = "eventversion"
	// CEAggregateType carries the aggregate type.
	CEAggregateType = "aggregatetype"
	// CEMinReaderVersion carries [MetadataMinReaderVersion].
	CEMinReaderVersion = "minreaderversion"
	// CECorrelationID carries [MetadataCorrelationID].
	CECorrelationID = "correlationid"
)

// cloudEventsPrefixes are the prefixes EnvelopeFromMetadata recognises.
var cloudEventsPrefixes = [...]string{CloudEventsPrefixKafka, CloudEventsPrefixHTTP, CloudEventsPrefixAMQP, CloudEventsPrefixAMQPJMS}

// CloudEvents maps envelopes to CloudEvents 1.0 binary content mode
// metadata. The zero value is not usable: Source is required.
//
// The mapping, for the default Kafka prefix ce_:
//
//	metadata key         CloudEvents attribute   envelope
//	ce_specversion       specversion (required)  "1.0"
//	ce_id                id (required)           EventID
//	ce_source            source (required)       Source
//	ce_type              type (required)         EventType
//	ce_time              time                    OccurredAt, RFC 3339, UTC
//	ce_dataschema        dataschema              DataSchemaBase/<type>/v<version>.schema.json
//	content-type         datacontenttype         "application/json"
//	ce_partitionkey      partitionkey (ext.)     AggregateID
//	ce_eventversion      eventversion (ext.)     EventVersion
//	ce_aggregatetype     aggregatetype (ext.)    AggregateType
//	ce_minreaderversion  minreaderversion (ext.) Headers["min_reader_version"]
//	ce_correlationid     correlationid (ext.)    Headers["correlation_id"]
//
// Every other header (traceparent and tracestate included, which
// OpenTelemetry propagators read under these names) is written unchanged.
type CloudEvents struct {
	// Source is the source attribute: a URI-reference naming the producer,
	// e.g. "/orders-service" or "https://example.com/orders". Required.
	Source string
	// DataSchemaBase, when set, is an absolute URI under which the JSON
	// Schemas exported by outboxgen -export are served: dataschema is
	// DataSchemaBase + "/" + type + "/v" + version + ".schema.json", the
	// path of the exported file. Default: "", no dataschema attribute.
	DataSchemaBase string
	// Prefix names the attributes in metadata: [CloudEventsPrefixKafka]
	// (ce_), [CloudEventsPrefixHTTP] (ce-, also NATS),
	// [CloudEventsPrefixAMQP] (cloudEvents:) or [CloudEventsPrefixAMQPJMS]
	// (cloudEvents_). Adapters write metadata keys as broker headers
	// unchanged, so pick the prefix of the broker's binding.
	// Default: "", which means ce_.
	Prefix string
}

// Validate reports whether c produces valid CloudEvents: Source is a
// non-empty URI-reference, DataSchemaBase is empty or an absolute URI, and
// Prefix is empty or one of the binding prefixes. The error names the
// field.
func (c CloudEvents) Validate() error {
	if c.Source == "" {
		return errors.New("outbox: CloudEvents.Source is empty (the source attribute is required)")
	}
	if _, err := url.Parse(c.Source); err != nil {
		return fmt.Errorf("outbox: CloudEvents.Source %q is not a URI-reference: %w", c.Source, err)
	}
	if c.DataSchemaBase != "" {
		u, err := url.Parse(c.DataSchemaBase)
		if err != nil || !u.IsAbs() {
			return fmt.Errorf("outbox: CloudEvents.DataSchemaBase %q is not an absolute URI", c.DataSchemaBase)
		}
	}
	if c.Prefix != "" {
		for _, p := range cloudEventsPrefixes {
			if c.Prefix == p {
				return nil
			}
		}
		return fmt.Errorf("outbox: CloudEvents.Prefix %q is not a binding prefix (ce_, ce-, cloudEvents:, cloudEvents_)", c.Prefix)
	}
	return nil
}

// DataSchema returns the dataschema URI of the given event type and version,
// or "" when DataSchemaBase is empty.
func (c CloudEvents) DataSchema(eventType string, version int) string {
	if c.DataSchemaBase == "" {
		return ""
	}
	return strings.TrimSuffix(c.DataSchemaBase, "/") + "/" + url.PathEscape(eventType) + "/v" + strconv.Itoa(version) + ".schema.json"
}

// Metadata returns e's wire metadata in CloudEvents binary content mode (see
// the table on [CloudEvents]). Attributes win over headers of the same name.
// It does not check c; call [CloudEvents.Validate] once first.
func (c CloudEvents) Metadata(e Envelope) map[string]string {
	p := c.Prefix
	if p == "" {
		p = CloudEventsPrefixKafka
	}
	md := make(map[string]string, 10+len(e.Headers))
	for k, v := range e.Headers {
		switch k {
		case MetadataMinReaderVersion:
			k = p + CEMinReaderVersion
		case MetadataCorrelationID:
			k = p + CECorrelationID
		}
		md[k] = v
	}
	md[p+CESpecVersion] = CloudEventsSpecVersion
	md[p+CEID] = e.EventID.String()
	md[p+CESource] = c.Source
	md[p+CEType] = e.EventType
	md[p+CETime] = e.OccurredAt.UTC().Format(time.RFC3339Nano)
	if s := c.DataSchema(e.EventType, e.EventVersion); s != "" {
		md[p+CEDataSchema] = s
	}
	md[MetadataContentType] = "application/json"
	md[p+CEEventVersion] = strconv.Itoa(e.EventVersion)
	if e.AggregateID != "" {
		md[p+CEPartitionKey] = e.AggregateID
	}
	if e.AggregateType != "" {
		md[p+CEAggregateType] = e.AggregateType
	}
	return md
}

// cloudEventsPrefix returns the prefix of md's CloudEvents attributes: the
// first binding prefix whose specversion key is set, or "" when md is not a
// CloudEvent.
func cloudEventsPrefix(md map[string]string) string {
	for _, p := range cloudEventsPrefixes {
		if _, ok := md[p+CESpecVersion]; ok {
			return p
		}
	}
	return ""
}

// AggregateOf returns the aggregate of a message's metadata: the
// aggregate_type and aggregate_id keys, or for a CloudEvent without them its
// aggregatetype and partitionkey attributes. Adapters key and order messages
// by it.
func AggregateOf(md map[string]string) (aggregateType, aggregateID string) {
	if id := md[MetadataAggregateID]; id != "" {
		return md[MetadataAggregateType], id
	}
	if p := cloudEventsPrefix(md); p != "" {
		return md[p+CEAggregateType], md[p+CEPartitionKey]
	}
	return md[MetadataAggregateType], ""
}

// envelopeFromCloudEvent is EnvelopeFromMetadata for metadata holding
// CloudEvents attributes with prefix p (see the table on [CloudEvents]).
func envelopeFromCloudEvent(p string, md map[string]string, payload []byte) (Envelope, error) {
	if sv := md[p+CESpecVersion]; !strings.HasPrefix(sv, "1.") {
		return Envelope{}, fmt.Errorf("%w: %s%s %q: only CloudEvents 1.x is supported", ErrInvalidEnvelope, p, CESpecVersion, sv)
	}
	for _, a := range [...]string{CEID, CESource, CEType} {
		if md[p+a] == "" {
			return Envelope{}, fmt.Errorf("%w: missing %s%s (a required CloudEvents attribute)", ErrInvalidEnvelope, p, a)
		}
	}
	id, err := uuid.Parse(md[p+CEID])
	if err != nil {
		// CloudEvents ids are any string, unique per source: derive a
		// stable UUID so that the inbox deduplicates them all the same.
		id = uuid.NewSHA1(uuid.NameSpaceURL, []byte(md[p+CESource]+"#"+md[p+CEID]))
	}
	env := Envelope{
		EventID:       id,
		EventType:     md[p+CEType],
		AggregateType: md[p+CEAggregateType],
		AggregateID:   md[p+CEPartitionKey],
		Payload:       json.RawMessage(payload),
	}
	if s := md[p+CETime]; s != "" {
		if env.OccurredAt, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return Envelope{}, fmt.Errorf("%w: %s%s %q: %v", ErrInvalidEnvelope, p, CETime, s, err)
		}
	}
	if s, ok := md[p+CEEventVersion]; ok {
		if env.EventVersion, err = strconv.Atoi(s); err != nil || env.EventVersion < 1 {
			return Envelope{}, fmt.Errorf("%w: %s%s %q", ErrInvalidEnvelope, p, CEEventVersion, s)
		}
	} else {
		var v struct {
			EventVersion int `json:"event_version"`
		}
		if err := json.Unmarshal(payload, &v); err != nil || v.EventVersion < 1 {
			return Envelope{}, fmt.Errorf("%w: no %s%s and no event_version >= 1 in the payload", ErrInvalidEnvelope, p, CEEventVersion)
		}
		env.EventVersion = v.EventVersion
	}
	if env.Payload, err = completePayload(env.Payload, env.EventVersion, md[p+CETime]); err != nil {
		return Envelope{}, err
	}
	for k, v := range md {
		if name, ok := strings.CutPrefix(k, p); ok {
			switch name {
			case CEID, CEType, CETime, CEEventVersion, CEPartitionKey, CEAggregateType:
				continue // in the envelope's fields
			case CEMinReaderVersion:
				k = MetadataMinReaderVersion
			case CECorrelationID:
				k = MetadataCorrelationID
			}
		}
		if env.Headers == nil {
			env.Headers = make(map[string]string)
		}
		env.Headers[k] = v
	}
	return env, nil
}

// completePayload adds to a CloudEvent's JSON object payload that has no
// event_version the event_version and occurred_at fields every event
// carries, from the eventversion and time attributes: another producer's
// event carries its version and time as attributes only, and the event
// structs require both fields. A payload with an event_version, or that is
// not a JSON object, is returned as it is (a version in the payload that
// differs from the attribute then fails to decode, as a conflict should).
func completePayload(payload json.RawMessage, version int, ceTime string) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return payload, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return payload, nil // not JSON after all: the decoder reports it
	}
	if _, ok := fields["event_version"]; ok {
		return payload, nil // an outbox event's payload, or one like it
	}
	fields["event_version"] = json.RawMessage(strconv.Itoa(version))
	if _, ok := fields["occurred_at"]; !ok && ceTime != "" {
		t, err := json.Marshal(ceTime)
		if err != nil {
			return nil, fmt.Errorf("%w: time %q: %v", ErrInvalidEnvelope, ceTime, err)
		}
		fields["occurred_at"] = t
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrInvalidEnvelope, err)
	}
	return out, nil
}
