package consumer

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidConfig is wrapped by the errors [Config.Validate] and [New]
// return for a configuration they reject. The error text names the field.
var ErrInvalidConfig = errors.New("consumer: invalid config")

// ErrInvalidHandler is wrapped by the errors [Handle] and
// [HandleWithoutInbox] return for a handler they cannot register: a second
// handler for the same event type, an event type the registry does not know,
// a type that is not the latest version of its event, or (for [Handle]) a
// consumer without [Config.DB] or a driver that is not its Config.DB.
var ErrInvalidHandler = errors.New("consumer: invalid handler")

// ErrInvalidTable is wrapped by [New], [Migrate] and [DDL] when the inbox
// table name is not a plain SQL identifier (optionally schema-qualified).
var ErrInvalidTable = errors.New("consumer: invalid inbox table name")

// ErrUnsupportedDialect is wrapped by [New], [Migrate] and [DDL] for a
// dialect the inbox has no SQL for (supported: postgres or pgx, sqlite,
// mysql), as [DDL]'s argument or [Config.DB]'s.
var ErrUnsupportedDialect = errors.New("consumer: unsupported database dialect")

// ErrNilEventID is wrapped, together with [runtime.ErrInvalidEnvelope], by
// the error of a message whose event id (the event_id metadata, or the
// message UUID when that is absent) is the nil UUID. The inbox deduplicates
// on the event id, so accepting it would apply the first such message and
// drop every later one as a duplicate; the message is rejected as malformed
// ([ReasonMalformed]) instead, and never reaches a handler.
var ErrNilEventID = errors.New("consumer: event id is the nil UUID")

// ErrTypeMismatch is wrapped by the error a consumer returns (and nacks
// with) when the registry decodes an event into a Go type other than the
// one its handler takes: the registered decoder and the handler disagree,
// which only a new deployment can fix.
var ErrTypeMismatch = errors.New("consumer: decoded event type does not match the handler")

// ErrTxTimeout is wrapped, inside an [*InboxError], by the error of an
// attempt whose inbox transaction did not commit within [Config.TxTimeout]:
// a database or connection that does not answer (a half-open connection), a
// lock held by another transaction, or a handler that blocked. The consumer
// retries the attempt and then nacks the message; it never dead-letters it
// for this.
var ErrTxTimeout = errors.New("consumer: inbox transaction timed out")

// HandlerError reports that a handler returned an error (or panicked) for an
// event, on its last attempt. The consumer dead-letters the message when a
// dead-letter publisher is configured; otherwise it nacks it.
type HandlerError struct {
	// EventType is the event's wire type.
	EventType string
	// Attempts is how many times the handler ran for this delivery.
	Attempts int
	// Err is what the handler returned on its last attempt, or a
	// [*PanicError].
	Err error
}

// Error returns the event type, the attempts and the handler's error.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("consumer: handler for %s failed after %d attempt(s): %v", e.EventType, e.Attempts, e.Err)
}

// Unwrap returns Err.
func (e *HandlerError) Unwrap() error { return e.Err }

// PanicError reports a handler that panicked. The panic is recovered, the
// handler's transaction is rolled back, and the attempt counts as failed.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
}

// Error returns the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("consumer: handler panicked: %v", e.Value) }

// InboxError reports a failure of the inbox transaction itself: beginning
// it, inserting the inbox marker, committing, or not finishing within
// [Config.TxTimeout] ([ErrTxTimeout]), whichever statement the deadline
// interrupted, the handler's included. It is never the message's
// fault, so the consumer never dead-letters a message for it; it nacks the
// message, which is delivered again. A commit error is ambiguous (the
// transaction may have committed); the redelivery finds the marker then.
type InboxError struct {
	// Err is the database error.
	Err error
}

// Error returns the database error with the package prefix.
func (e *InboxError) Error() string {
	msg := e.Err.Error()
	if strings.HasPrefix(msg, "consumer: inbox") { // ErrTxTimeout says it already
		return msg
	}
	return "consumer: inbox: " + msg
}

// Unwrap returns Err.
func (e *InboxError) Unwrap() error { return e.Err }
