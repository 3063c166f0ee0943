package sqlstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

// RowValues are the columns of one outbox row as a reader gets them: the
// claim query of a [Store], or a change stream (logical replication, a
// Debezium-style connector) that delivers the rows of the outbox table as
// they are inserted. [DecodeRow] turns them into the message the relay
// publishes.
type RowValues struct {
	// ID is the id column (the row's position in the outbox).
	ID int64
	// EventID is the event_id column, a UUID in its text form.
	EventID string
	// EventType, EventVersion, AggregateType, AggregateID and Topic are the
	// columns of the same names.
	EventType     string
	EventVersion  int
	AggregateType string
	AggregateID   string
	Topic         string
	// Payload is the payload column: the event's JSON.
	Payload []byte
	// Headers is the headers column: a JSON object of strings, or "" (or
	// "null") for a NULL column.
	Headers string
	// OccurredAt and CreatedAt are the occurred_at and created_at columns.
	OccurredAt time.Time
	CreatedAt  time.Time
	// Attempts is the attempts column (0 for a row never tried).
	Attempts int
}

// DecodeRow returns the message of an outbox row: the event id parsed, the
// headers decoded, the times in UTC. It returns an error naming the row for
// a malformed event id or headers column.
func DecodeRow(r RowValues) (runtime.OutboxMessage, error) {
	m := runtime.OutboxMessage{
		ID:        r.ID,
		Topic:     r.Topic,
		CreatedAt: r.CreatedAt.UTC(),
		Attempts:  r.Attempts,
		Envelope: runtime.Envelope{
			EventType:     r.EventType,
			EventVersion:  r.EventVersion,
			AggregateType: r.AggregateType,
			AggregateID:   r.AggregateID,
			OccurredAt:    r.OccurredAt.UTC(),
			Payload:       r.Payload,
		},
	}
	var err error
	if m.EventID, err = uuid.Parse(r.EventID); err != nil {
		return runtime.OutboxMessage{}, fmt.Errorf("sqlstore: row %d: event id %q: %w", r.ID, r.EventID, err)
	}
	if r.Headers != "" && r.Headers != "null" {
		if err := json.Unmarshal([]byte(r.Headers), &m.Headers); err != nil {
			return runtime.OutboxMessage{}, fmt.Errorf("sqlstore: row %d: headers: %w", r.ID, err)
		}
	}
	return m, nil
}

// EncodeHeaders returns the headers column of an event's headers: their
// JSON object, or "" (store NULL) when there are none.
func EncodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("sqlstore: marshal headers: %w", err)
	}
	return string(b), nil
}

// logicalMessage is the content of a transactional logical decoding
// message that carries an event instead of an outbox row (see
// [EncodeLogicalMessage]).
type logicalMessage struct {
	EventID       string            `json:"event_id"`
	EventType     string            `json:"event_type"`
	EventVersion  int               `json:"event_version"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	Topic         string            `json:"topic"`
	Payload       json.RawMessage   `json:"payload"`
	Headers       map[string]string `json:"headers,omitempty"`
	OccurredAt    time.Time         `json:"occurred_at"`
	CreatedAt     time.Time         `json:"created_at"`
}

// EncodeLogicalMessage returns the content of the logical decoding message
// that carries r's event in place of an outbox row (PostgreSQL's
// pg_logical_emit_message, read back by a change-data-capture relay with
// [DecodeLogicalMessage]): a JSON object of the row's columns but id and
// attempts, the payload as JSON, the headers as an object. r.Headers must
// be a headers column ("" or a JSON object of strings).
func EncodeLogicalMessage(r RowValues) ([]byte, error) {
	m := logicalMessage{
		EventID: r.EventID, EventType: r.EventType, EventVersion: r.EventVersion,
		AggregateType: r.AggregateType, AggregateID: r.AggregateID, Topic: r.Topic,
		Payload: r.Payload, OccurredAt: r.OccurredAt.UTC(), CreatedAt: r.CreatedAt.UTC(),
	}
	if r.Headers != "" && r.Headers != "null" {
		if err := json.Unmarshal([]byte(r.Headers), &m.Headers); err != nil {
			return nil, fmt.Errorf("sqlstore: logical message of event %s: headers: %w", r.EventID, err)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: logical message of event %s: %w", r.EventID, err)
	}
	return b, nil
}

// DecodeLogicalMessage returns the row values carried by a logical
// decoding message that [EncodeLogicalMessage] wrote (ID and Attempts
// zero: the reader numbers the messages itself). It returns an error for
// content that is not such a message.
func DecodeLogicalMessage(content []byte) (RowValues, error) {
	var m logicalMessage
	if err := json.Unmarshal(content, &m); err != nil {
		return RowValues{}, fmt.Errorf("sqlstore: logical message: %w", err)
	}
	if m.EventID == "" || m.EventType == "" || m.Topic == "" {
		return RowValues{}, fmt.Errorf("sqlstore: logical message: no event_id, event_type or topic")
	}
	headers, err := EncodeHeaders(m.Headers)
	if err != nil {
		return RowValues{}, err
	}
	return RowValues{
		EventID: m.EventID, EventType: m.EventType, EventVersion: m.EventVersion,
		AggregateType: m.AggregateType, AggregateID: m.AggregateID, Topic: m.Topic,
		Payload: m.Payload, Headers: headers, OccurredAt: m.OccurredAt, CreatedAt: m.CreatedAt,
	}, nil
}
