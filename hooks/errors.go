package hooks

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// ErrInvalidTable is wrapped by [New], [NewStore], [Migrate] and [DDL] when a
// configured table name is not a plain SQL identifier.
var ErrInvalidTable = errors.New("hooks: invalid outbox table name")

// ErrUnsupportedDialect is returned by [New]'s Initialize, [NewStore],
// [Migrate] and [DDL] for a GORM dialect the outbox has no SQL for.
var ErrUnsupportedDialect = errors.New("hooks: unsupported database dialect")

// ErrNoAggregateID is wrapped by a save's error when a model with pending
// events has no aggregate id: its primary key is zero and it does not
// implement AggregateID.
var ErrNoAggregateID = errors.New("hooks: aggregate has no id")

// WriteError reports a failure to write the outbox rows of a save. The save
// fails with it and its transaction rolls back; the events stay pending on
// their aggregates.
type WriteError struct {
	// AggregateType and AggregateID name the aggregate whose events failed,
	// when known.
	AggregateType string
	AggregateID   string
	// Err is the cause: a [*runtime.EncodeError] for an event that fails
	// validation or marshalling, or the database error.
	Err error
}

// Error returns the message, naming the aggregate when known.
func (e *WriteError) Error() string {
	if e.AggregateType == "" {
		return fmt.Sprintf("hooks: write outbox rows: %v", e.Err)
	}
	return fmt.Sprintf("hooks: write outbox rows of %s %q: %v", e.AggregateType, e.AggregateID, e.Err)
}

// Unwrap returns the cause.
func (e *WriteError) Unwrap() error { return e.Err }

// EventTooLargeError is the error of a save (wrapped in a [*WriteError]) or
// an Enqueue whose event payload is larger than [Config.MaxEventBytes]. The
// save rolls back and the event stays pending on its aggregate.
type EventTooLargeError struct {
	// EventType and EventID name the event.
	EventType string
	EventID   uuid.UUID
	// Size is the payload's size and Limit the configured maximum, in bytes.
	Size, Limit int
}

// Error names the event and both sizes.
func (e *EventTooLargeError) Error() string {
	return fmt.Sprintf("hooks: event %s (%s) is %d bytes, more than MaxEventBytes %d", e.EventType, e.EventID, e.Size, e.Limit)
}
