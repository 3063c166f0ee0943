package hooks

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrNoAggregateID is wrapped by a save's error when a model with pending
// events has no aggregate id: its primary key is zero and it does not
// implement AggregateID.
var ErrNoAggregateID = errors.New("hooks: aggregate has no id")

// ErrAmbiguousWrite is wrapped by a save's error (in a [*WriteError]) when
// models with pending events went through a statement whose row count does
// not say which of them it wrote: a Create with ON CONFLICT DO NOTHING or
// INSERT IGNORE of several models that skipped some, an Update or Delete
// of several models some of whose rows do not exist, and on MySQL any
// Create with ON CONFLICT DO NOTHING (GORM writes it as ON DUPLICATE KEY
// UPDATE, which counts a row that existed as written). Writing every
// model's events would publish changes that did not happen, writing none
// would lose those that did: the save fails and rolls back, and the events
// stay pending. Save such models one at a time (a statement that writes no
// row keeps its events pending without an error), or on MySQL use
// clause.Insert{Modifier: "IGNORE"}.
var ErrAmbiguousWrite = errors.New("hooks: cannot tell which models the statement wrote")

// PanicError reports a panic in event code during a save or an Enqueue: a
// typed-nil event, or an event's or aggregate's method (EventKey, Validate,
// MarshalJSON, AggregateType, AggregateID) that panicked. The plugin
// recovers it and fails the save with it, wrapped in a [*WriteError], so the
// save rolls back like any failed save — GORM's transaction, or the one the
// plugin began, is rolled back and releases its locks; in db.Transaction the
// error is returned to the function, which returns it — and the events stay
// pending. It is a bug in the event code: fix it, or drop the events with
// ClearEvents.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the stack of the goroutine that panicked, as formatted by
	// runtime/debug.Stack.
	Stack []byte
}

func newPanicError(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

// Error returns the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("hooks: panic in event code: %v", e.Value) }

// Unwrap returns the panic value when it is an error (a runtime error, say).
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

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
