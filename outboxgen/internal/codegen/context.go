package codegen

// The types in this file are the template context: plain data the
// templates in package templates range over and print. Doc fields hold
// complete comment blocks ("// ...\n" lines); statement fields hold Go
// source that go/format re-indents.

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
	// Events are the Go names of the events, for Register.
	Events []string
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
	// Validate holds the statements of its validate method; empty means
	// the type has no constraints and no validate method.
	Validate []string
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

// Event is the context of an event file.
type Event struct {
	Name     string
	TypeLit  string
	Latest   int
	TypeDoc  string
	AliasDoc string
	Versions []Version
	// Constructor builds the latest version.
	Constructor Constructor
	DecodeDoc   string
	// Upcasts are the generated upcasters (compatible steps only).
	Upcasts []Upcast
}

// Version is one version struct with its methods.
type Version struct {
	Doc       string
	Name      string
	Number    int
	MinReader int
	Fields    []StructField
	Validate  []string
	// RequiredKeys is the argument list of runtime.MissingKeys: quoted
	// keys of every non-optional field.
	RequiredKeys string
	// Defaults fill keys missing from a payload.
	Defaults []Assign
	// Chain upcasts a decoded value of this version to the latest.
	Chain []Step
}

// Assign is a field assignment: a struct literal entry or a default.
type Assign struct {
	Key   string
	Field string
	Expr  string
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
	ToNumber int
	Assigns  []Assign
	Post     []string
}
