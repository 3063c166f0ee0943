package codegen

// The types in this file are the template context: plain data the templates
// in package templates range over and print. Go code here computes names,
// Go types, literals and prose; the templates write every declaration and
// statement. Doc fields hold complete comment blocks ("// ...\n" lines),
// already wrapped.

// File is one generated file: either the shared file of a schema (Shared
// set) or the file of one event (Event set).
type File struct {
	// Name is the output file name, e.g. order_paid.gen.go.
	Name string
	// Source is the schema path written in the header.
	Source  string
	Package string
	Imports []Import
	Shared  *Shared
	Event   *Event
}

// Import is one import line; a Blank import separates the standard
// library group from the others.
type Import struct {
	Path  string
	Blank bool
}

// Shared holds what every event of a schema uses.
type Shared struct {
	Enums    []Enum
	Objects  []Object
	Patterns []Pattern
	// Entries are the validators of map values of object fields.
	Entries []Entry
	// Events are the Go names of the events, for Register.
	Events []string
	// Shapes describe the object types for outboxgenrt.MissingPaths, in
	// the order of the schema's types (the table outboxgenObjects); empty
	// when the schema has no types.
	Shapes []Shape
}

// Shape is an outboxgenrt.ObjectShape: the required keys of an object and
// its keys holding further objects.
type Shape struct {
	// Name is the object type's Go name (in the table only).
	Name string
	// Required are the quoted keys of every non-optional field that is not
	// a list or map.
	Required []string
	Nested   []NestedShape
}

// NestedShape is a key whose value holds objects: Containers (quoted, "l"
// and "m" outermost first) around the object type at index Object of the
// table.
type NestedShape struct {
	Key        string
	Containers string
	Object     int
	// Type is the Go name of the object type, for a comment.
	Type string
}

// Enum is a named string type with its constants.
type Enum struct {
	Doc    string
	Name   string
	Values []EnumValue
}

// EnumValue is one constant of an enum.
type EnumValue struct {
	Const   string
	Literal string
}

// Object is a named object type.
type Object struct {
	Doc    string
	Name   string
	Fields []StructField
	// Checks are the statements of its validate method; empty means the
	// type has no constraints and no validate method.
	Checks []Check
}

// StructField is a field of a generated struct.
type StructField struct {
	Doc  string
	Name string
	Type string
	Tag  string
}

// Pattern is a compiled regular expression of a string field.
type Pattern struct {
	Var     string
	Literal string
}

// Check is one validation statement. Kind selects the template partial
// that writes it:
//
//	maxLength, pattern, min, max, decimal, uuidSet, timeSet, enum
//	           a condition on X; a failure returns a *runtime.FieldError
//	object     X.validate(), whose error path is prefixed with Path
//	list       a loop over X (Index, Elem) running Checks on each element
//	map        outboxgenrt.InvalidEntry(X, Func), whose error path is
//	           prefixed with Path and the key
//	optional   X != nil guarding Checks
type Check struct {
	Kind string
	// X is the value checked (a selector, a loop variable, or a
	// dereference of either).
	X string
	// Guard is a pointer a condition first tests for nil (an optional
	// field with a single condition), or "".
	Guard string
	// Path is where the value sits, for the error.
	Path Path
	// N is the limit of maxLength, min and max.
	N int64
	// Var is the pattern variable of pattern.
	Var string
	// Problem is the quoted problem text of a condition.
	Problem string
	// Consts and Values are the accepted constants and their wire values
	// (for the message) of enum.
	Consts []string
	Values string
	// Index and Elem are the loop variables of list.
	Index, Elem string
	// Func validates one value of map: a method expression or an Entry.
	Func string
	// Checks are the nested checks of list and optional.
	Checks []Check
}

// Path is the JSON path of a checked value. A path inside a validate method
// or an Entry is a suffix relative to the value checked (".street", "[2]",
// or "" for the value itself); the caller prefixes it on the failing branch
// only, so a valid value costs no allocation.
type Path struct {
	// Empty is the path of the value itself inside an Entry.
	Empty bool
	// Lit is the path when it has no dynamic part (Args empty), quoted.
	Lit string
	// Format and Args build it with fmt.Sprintf otherwise; Format is quoted.
	Format string
	Args   []string
}

// Entry is a generated function validating one value of a map field whose
// values have constraints.
type Entry struct {
	Func string
	// Param names the value, of Go type Type.
	Param  string
	Type   string
	Checks []Check
}

// Event is the context of an event file.
type Event struct {
	Name      string
	TypeLit   string
	Latest    int
	TypeDoc   string
	LatestDoc string
	NewerDoc  string
	AliasDoc  string
	Versions  []Version
	// Constructor builds the latest version.
	Constructor Constructor
	DecodeDoc   string
	// Upcasts are the generated upcasters (compatible steps only).
	Upcasts []Upcast
	// Entries are the validators of map values of the event's fields.
	Entries []Entry
}

// Version is one version struct with its methods.
type Version struct {
	Doc  string
	Name string
	// Event is the Go name of the event, Type its wire type.
	Event, Type string
	Number      int
	// IsLatest marks the latest version, whose decoder also reads newer
	// payloads declared readable by it.
	IsLatest bool
	// MinReader is the oldest version whose reader decodes this version's
	// payloads directly (EventMinReader), MinReaderDoc the method's doc.
	MinReader    int
	MinReaderDoc string
	Fields       []StructField
	Checks       []Check
	// Shape holds the quoted keys of every non-optional field and the
	// fields holding objects, for outboxgenrt.MissingPaths.
	Shape Shape
	// Objects is the expression of the object table: outboxgenObjects,
	// or nil when the schema has no types.
	Objects string
	// Defaults fill keys missing from a payload.
	Defaults []Assign
	// Chain upcasts a decoded value of this version to the latest.
	Chain []Step
}

// Value is a Go expression the templates write: a conversion of X, a
// default literal, or a parameter.
//
//	""          X as is
//	address     &X
//	int64       int64(X)
//	string      string(X)
//	uuidString  X.String()
//	literal     Lit (a quoted string, number, bool or constant name)
//	uuid        uuid.MustParse(Lit)
//	time        time.Date(Time..., time.UTC)
//	empty       Type{} (an empty list or map)
type Value struct {
	Kind string
	X    string
	Lit  string
	Type string
	Time []int
}

// Assign is a field assignment: a struct literal entry or a default.
type Assign struct {
	Key   string
	Field string
	Value Value
}

// Step is one upcast in a decode chain.
type Step struct {
	Func        string
	From, To    int
	HandWritten bool
}

// Constructor is the New function of the latest version.
type Constructor struct {
	Doc     string
	Params  []Param
	Assigns []Assign
}

// Param is a constructor parameter.
type Param struct {
	Name string
	Type string
}

// Upcast is a generated upcaster between two compatible versions.
type Upcast struct {
	Doc      string
	Func     string
	From, To string
	// In and Out name the parameter and, when Posts need one, the result
	// variable (v1, v2).
	In, Out  string
	ToNumber int
	Assigns  []Assign
	// Posts set optional fields after the struct literal.
	Posts []Post
}

// Post is an assignment after an upcast's struct literal, for fields that
// need a nil check or a variable to point at.
type Post struct {
	// Field is the destination field.
	Field string
	// Check is the source pointer tested for nil first, or "".
	Check string
	// Var holds Value when the destination is a pointer, or "" to assign
	// Value directly.
	Var   string
	Value Value
}
