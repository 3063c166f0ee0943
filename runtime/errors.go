package runtime

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnknownEventType is wrapped by [*UnknownEventTypeError], returned by
// [Registry.Decode] for a type that was never registered.
var ErrUnknownEventType = errors.New("outbox: unknown event type")

// ErrUnknownVersion is wrapped by [*UnknownVersionError], returned by
// [Registry.Decode] and generated decoders for a version they do not know.
var ErrUnknownVersion = errors.New("outbox: unknown event version")

// ErrDuplicateRegistration is returned by [Registry.Register] when a (type,
// version) is registered twice.
var ErrDuplicateRegistration = errors.New("outbox: duplicate event registration")

// ErrInvalidEnvelope is wrapped by errors from [NewEnvelope] and
// [EnvelopeFromMetadata] when an input lacks a required part (type, version,
// aggregate id, event id) or carries a malformed one.
var ErrInvalidEnvelope = errors.New("outbox: invalid envelope")

// UnknownEventTypeError reports an event type the registry does not know.
type UnknownEventTypeError struct {
	// Type is the wire type that was asked for.
	Type string
}

// Error returns the message, naming the type.
func (e *UnknownEventTypeError) Error() string {
	return fmt.Sprintf("outbox: unknown event type %q", e.Type)
}

// Unwrap returns [ErrUnknownEventType].
func (e *UnknownEventTypeError) Unwrap() error { return ErrUnknownEventType }

// UnknownVersionError reports a version of a known event type that the
// decoder was not generated with.
type UnknownVersionError struct {
	// Key is the (type, version) that was asked for.
	Key Key
	// Latest is the newest version the decoder knows.
	Latest int
}

// Error returns the message, naming the type and both versions.
func (e *UnknownVersionError) Error() string {
	if e.Newer() {
		return fmt.Sprintf("outbox: %s is newer than the latest known version %d", e.Key, e.Latest)
	}
	return fmt.Sprintf("outbox: unknown version %s (latest known %d)", e.Key, e.Latest)
}

// Newer reports whether the version is newer than anything the decoder knows:
// the message was written by a newer deployment and should be retried (or
// parked) rather than dropped.
func (e *UnknownVersionError) Newer() bool { return e.Key.Version > e.Latest }

// Unwrap returns [ErrUnknownVersion].
func (e *UnknownVersionError) Unwrap() error { return ErrUnknownVersion }

// EncodeError reports an event that could not be turned into an outbox
// message: it failed validation or could not be marshalled to JSON. A save
// that fails with an EncodeError writes nothing.
type EncodeError struct {
	// Key is the event's type and version.
	Key Key
	// Err is the validation or marshalling error.
	Err error
}

// Error returns the message, naming the event type and version.
func (e *EncodeError) Error() string {
	return fmt.Sprintf("outbox: encode event %s: %v", e.Key, e.Err)
}

// Unwrap returns the underlying error.
func (e *EncodeError) Unwrap() error { return e.Err }

// DecodeError reports a payload that could not be decoded into its event type.
type DecodeError struct {
	// Key is the event's type and version as found on the message.
	Key Key
	// Err is the underlying error.
	Err error
}

// Error returns the message, naming the event type and version.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("outbox: decode event %s: %v", e.Key, e.Err)
}

// Unwrap returns the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }

// FieldError reports a field whose value violates its schema: out of range,
// too long, not matching its pattern, not one of its enum values. Generated
// Validate methods return it; [NewEnvelope] wraps it in an [*EncodeError] and
// generated decoders in a [*DecodeError].
type FieldError struct {
	// Field is the JSON path of the field, e.g. "amount.currency" or
	// "lines[2].sku".
	Field string
	// Problem says what is wrong, e.g. "must be >= 1".
	Problem string
}

// Error returns the message, naming the field.
func (e *FieldError) Error() string {
	return fmt.Sprintf("field %s: %s", e.Field, e.Problem)
}

// MissingFieldsError reports a payload that lacks required keys, at the top
// level or in a nested object. Generated decoders return it (wrapped in a
// [*DecodeError]) instead of silently decoding zero values.
type MissingFieldsError struct {
	// Fields are the JSON paths of the missing keys, in the notation of
	// [FieldError].Field ("email", "address.city", "lines[2].sku"): the
	// event's own keys first in schema order, then nested ones in payload
	// order.
	Fields []string
}

// Error returns the message, naming the missing fields.
func (e *MissingFieldsError) Error() string {
	return "missing required field(s) " + strings.Join(e.Fields, ", ")
}
