// Package schema parses outboxgen schema files (events.yaml) into a checked,
// resolved model that carries source positions, for the compatibility
// checker, the code generator and the exporters.
//
// Parsing is strict: unknown keys, wrong YAML types, missing required keys,
// unknown field types and invalid constraints are all reported, with
// file:line:col and a "did you mean" where one helps. [Parse] reports every
// problem it finds, sorted, not just the first.
package schema

import (
	"fmt"
	"strings"
)

// FormatVersion is the only schema file format version (the outboxgen: key).
const FormatVersion = 1

// Mode is a compatibility mode, as in Confluent Schema Registry.
type Mode string

// The compatibility modes. Backward: the new version reads data written with
// older ones. Forward: older versions read data written with the new one.
// Full: both. Transitive modes check against every earlier version of the
// compatibility line, the others only against the previous version.
const (
	ModeNone               Mode = "none"
	ModeBackward           Mode = "backward"
	ModeBackwardTransitive Mode = "backward_transitive"
	ModeForward            Mode = "forward"
	ModeForwardTransitive  Mode = "forward_transitive"
	ModeFull               Mode = "full"
	ModeFullTransitive     Mode = "full_transitive"
)

// Modes lists every mode, for messages and suggestions.
var modes = []Mode{ModeNone, ModeBackward, ModeBackwardTransitive, ModeForward, ModeForwardTransitive, ModeFull, ModeFullTransitive}

// Backward reports whether the mode checks that new versions read old data.
func (m Mode) Backward() bool { return m != ModeNone && !strings.HasPrefix(string(m), "forward") }

// Forward reports whether the mode checks that old versions read new data.
func (m Mode) Forward() bool { return m != ModeNone && !strings.HasPrefix(string(m), "backward") }

// Transitive reports whether the mode checks against all earlier versions.
func (m Mode) Transitive() bool { return strings.HasSuffix(string(m), "_transitive") }

// File is a parsed schema file.
type File struct {
	// Path is the file as named on the command line, used in diagnostics.
	Path string
	// Package is the Go package name, or "" when the file does not set it.
	Package    string
	PackagePos Pos
	// Compatibility is the file's default mode.
	Compatibility Mode
	// Enums, Types and Events are in declaration order.
	Enums  []*Enum
	Types  []*Object
	Events []*Event
	// Incomplete marks a file whose events could not be read at all: a
	// YAML syntax error, an empty file, or no events: mapping (only in the
	// partial file [Parse] returns with its errors). Nothing is known
	// about its events, so the checker compares nothing, not even with
	// the lock file.
	Incomplete bool
}

// Enum is a named string enumeration.
type Enum struct {
	Name   string
	Doc    string
	Values []string
	Pos    Pos
	// Incomplete marks an enum with a parse error (only in the partial
	// file [Parse] returns with its errors).
	Incomplete bool
}

// Has reports whether v is one of the enum's values.
func (e *Enum) Has(v string) bool {
	for _, x := range e.Values {
		if x == v {
			return true
		}
	}
	return false
}

// Object is a named object type shared by events and versions.
type Object struct {
	Name   string
	Doc    string
	Fields []*Field
	Pos    Pos
	// Incomplete marks a type with a parse error, in itself or in a type
	// it uses (only in the partial file [Parse] returns with its errors).
	Incomplete bool
}

// Event is one event type with all its versions.
type Event struct {
	// Name is the Go name, e.g. OrderPaid.
	Name string
	// Type is the stable wire name, e.g. orders.order_paid.
	Type      string
	TypePos   Pos
	Aggregate string
	Doc       string
	// Deprecated is the deprecation note, or "" when the event is current.
	Deprecated string
	// Compatibility is the event's mode (the file's unless overridden).
	Compatibility Mode
	// Versions are sorted by number. They are contiguous from 1 unless the
	// checker reports VERSION_CONTIGUOUS.
	Versions []*Version
	Pos      Pos
	// Incomplete marks an event with a parse error outside its versions
	// (its type, mode or a version key), which makes every compatibility
	// check of it unreliable (only in the partial file [Parse] returns with
	// its errors).
	Incomplete bool
	// ownMode records that the event sets compatibility: itself.
	ownMode bool
}

// Latest returns the newest version.
func (e *Event) Latest() *Version { return e.Versions[len(e.Versions)-1] }

// Version is one version of an event.
type Version struct {
	Number int
	Doc    string
	// Breaking marks a version that is not compatible with the previous
	// one: it starts a new compatibility line and needs a hand-written
	// upcaster.
	Breaking bool
	// Draft versions are not frozen in the lock file yet.
	Draft      bool
	Deprecated string
	Fields     []*Field
	// Removed are tombstoned field names: never to be used again.
	Removed []Name
	Pos     Pos
	// Incomplete marks a version with a parse error, in itself or in a
	// type its fields use: the checker leaves it out of every pair it
	// compares (only in the partial file [Parse] returns with its errors).
	Incomplete bool
}

// Field returns the field with the given JSON name, or nil.
func (v *Version) Field(name string) *Field { return fieldByName(v.Fields, name) }

// Field returns the field with the given JSON name, or nil.
func (o *Object) Field(name string) *Field { return fieldByName(o.Fields, name) }

func fieldByName(fs []*Field, name string) *Field {
	for _, f := range fs {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// Name is a name with the position it was written at.
type Name struct {
	Name string
	Pos  Pos
}

// Field is a field of an event version or object type.
type Field struct {
	// Name is the JSON name (snake_case).
	Name string
	Doc  string
	Type *Type
	// Optional fields may be absent (nil in Go).
	Optional bool
	// Default, when set, fills the field when an older version lacks it.
	Default *Default
	// Constraints; nil when not set.
	Min, Max  *int64
	MaxLength *int
	Pattern   string
	// Values narrows an enum (or list/map of enum) to a subset for this
	// field; nil means every value of the enum.
	Values     []string
	Deprecated string
	// Pos is the position of the field's key, TypePos of its type.
	Pos     Pos
	TypePos Pos
}

// EnumValues returns the enum values this field accepts: its Values when
// narrowed, else all of the enum's. It returns nil for a non-enum field.
func (f *Field) EnumValues() []string {
	e := f.Type.Innermost().Enum
	if e == nil {
		return nil
	}
	if f.Values != nil {
		return f.Values
	}
	return e.Values
}

// Default is a field default, already checked against the field's type.
type Default struct {
	// Value is a string, int64, bool, or an empty []any / map[string]any.
	Value any
	Pos   Pos
}

// Kind is the kind of a field type.
type Kind int

// The field type kinds.
const (
	String Kind = iota + 1
	Bool
	Int32
	Int64
	Decimal
	UUID
	Timestamp
	EnumKind
	ObjectKind
	List
	Map
)

var scalarNames = map[string]Kind{
	"string": String, "bool": Bool, "int32": Int32, "int64": Int64,
	"decimal": Decimal, "uuid": UUID, "timestamp": Timestamp,
}

// Type is a field type.
type Type struct {
	Kind Kind
	// Enum or Object is set for EnumKind and ObjectKind.
	Enum   *Enum
	Object *Object
	// Elem is the element type of List and the value type of Map.
	Elem *Type
}

// Innermost returns the element type after unwrapping lists and maps.
func (t *Type) Innermost() *Type {
	for t.Kind == List || t.Kind == Map {
		t = t.Elem
	}
	return t
}

// String returns the type as written in a schema: int64, Money,
// list<string>, map<string,Money>.
func (t *Type) String() string {
	switch t.Kind {
	case EnumKind:
		return t.Enum.Name
	case ObjectKind:
		return t.Object.Name
	case List:
		return "list<" + t.Elem.String() + ">"
	case Map:
		return "map<string," + t.Elem.String() + ">"
	}
	for name, k := range scalarNames {
		if k == t.Kind {
			return name
		}
	}
	return fmt.Sprintf("Kind(%d)", t.Kind)
}

// Equal reports whether two types are the same.
func (t *Type) Equal(u *Type) bool {
	if t.Kind != u.Kind {
		return false
	}
	switch t.Kind {
	case EnumKind:
		return t.Enum == u.Enum
	case ObjectKind:
		return t.Object == u.Object
	case List, Map:
		return t.Elem.Equal(u.Elem)
	}
	return true
}
