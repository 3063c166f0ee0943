package runtime

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DecodeFunc decodes a payload of one (type, version) and upcasts it to the
// latest version of its type. Generated code provides one per version.
type DecodeFunc func(payload []byte) (Event, error)

// NewerDecodeFunc decodes a payload of a version newer than the latest one
// its package was generated with, as that latest version. Generated code
// provides one per type; [Registry.DecodeEnvelope] calls it only for a
// payload whose writer declared it readable by that latest version.
type NewerDecodeFunc func(version int, payload []byte) (Event, error)

// Registry maps (type, version) to decoders. Consumers fill one with the
// generated Register functions of the event packages they read, then decode
// any historical version of those events into the latest.
//
// The zero value is not ready; use [NewRegistry]. A Registry is safe for
// concurrent Decode calls once registration is done; Register is not safe to
// call concurrently with anything else.
type Registry struct {
	decoders map[Key]DecodeFunc
	latest   map[string]int
	newer    map[string]NewerDecodeFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{decoders: make(map[Key]DecodeFunc), latest: make(map[string]int), newer: make(map[string]NewerDecodeFunc)}
}

// Register adds the decoder of one (type, version); latest is the newest
// version of the type known to the registering package. It returns an error
// wrapping [ErrDuplicateRegistration] when the key is already registered, and
// an error for an empty type, a version < 1, a nil decoder, or a latest
// version that disagrees with an earlier registration of the same type.
func (r *Registry) Register(k Key, latest int, fn DecodeFunc) error {
	switch {
	case k.Type == "":
		return fmt.Errorf("outbox: register: empty event type")
	case k.Version < 1 || k.Version > latest:
		return fmt.Errorf("outbox: register %s: version must be in 1..%d", k, latest)
	case fn == nil:
		return fmt.Errorf("outbox: register %s: nil decoder", k)
	}
	if _, dup := r.decoders[k]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicateRegistration, k)
	}
	if l, ok := r.latest[k.Type]; ok && l != latest {
		return fmt.Errorf("outbox: register %s: latest version %d disagrees with %d registered before", k, latest, l)
	}
	r.decoders[k] = fn
	r.latest[k.Type] = latest
	return nil
}

// Decode decodes payload as the given (type, version) and returns it upcast
// to the latest registered version. It returns an [*UnknownEventTypeError] for
// an unregistered type and an [*UnknownVersionError] for an unregistered
// version (check [UnknownVersionError.Newer]).
func (r *Registry) Decode(eventType string, version int, payload []byte) (Event, error) {
	fn, ok := r.decoders[Key{Type: eventType, Version: version}]
	if !ok {
		latest, known := r.latest[eventType]
		if !known {
			return nil, &UnknownEventTypeError{Type: eventType}
		}
		return nil, &UnknownVersionError{Key: Key{Type: eventType, Version: version}, Latest: latest}
	}
	return fn(payload)
}

// RegisterNewer adds the decoder of eventType for payloads of versions newer
// than the registered latest (see [Registry.DecodeEnvelope]). It returns an
// error wrapping [ErrDuplicateRegistration] when eventType already has one,
// and an error for an empty or unregistered type or a nil decoder: register
// the type's versions first.
func (r *Registry) RegisterNewer(eventType string, fn NewerDecodeFunc) error {
	switch {
	case eventType == "":
		return fmt.Errorf("outbox: register newer: empty event type")
	case fn == nil:
		return fmt.Errorf("outbox: register newer %s: nil decoder", eventType)
	}
	if _, ok := r.latest[eventType]; !ok {
		return fmt.Errorf("outbox: register newer %s: no version of the type is registered", eventType)
	}
	if _, dup := r.newer[eventType]; dup {
		return fmt.Errorf("%w: newer versions of %s", ErrDuplicateRegistration, eventType)
	}
	r.newer[eventType] = fn
	return nil
}

// DecodeEnvelope decodes an envelope's payload; see [Registry.Decode].
//
// Old readers: a version newer than the latest registered one is decoded
// as that latest version when the envelope's [MetadataMinReaderVersion]
// header is at most the latest version and the type has a decoder for newer
// versions ([Registry.RegisterNewer]; generated Register functions add one).
// The writer sets the header only for versions its compatibility check
// proved readable by older readers, so fields the reader does not know are
// ignored, and a value it does not know fails validation with a
// [*DecodeError] rather than being mapped to a zero value. Without the
// header, such a payload is an [*UnknownVersionError] whose Newer reports
// true.
func (r *Registry) DecodeEnvelope(env Envelope) (Event, error) {
	if latest, ok := r.latest[env.EventType]; ok && env.EventVersion > latest {
		if fn := r.newer[env.EventType]; fn != nil {
			if m, err := strconv.Atoi(env.Headers[MetadataMinReaderVersion]); err == nil && m >= 1 && m <= latest {
				return fn(env.EventVersion, env.Payload)
			}
		}
	}
	return r.Decode(env.EventType, env.EventVersion, env.Payload)
}

// Latest returns the latest registered version of eventType, and false if
// the type is unknown.
func (r *Registry) Latest(eventType string) (int, bool) {
	v, ok := r.latest[eventType]
	return v, ok
}

// Keys returns every registered (type, version), sorted by type then version.
func (r *Registry) Keys() []Key {
	keys := make([]Key, 0, len(r.decoders))
	for k := range r.decoders {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	return keys
}
