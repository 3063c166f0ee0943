// Package templates holds the text/template files outboxgen renders Go code
// from. It is data, not API: the generator in outboxgen/internal/codegen
// builds a plain context (names, Go types, literals, wrapped doc comments and
// a tree of validation checks) and the templates write every declaration and
// statement, one {{define}} partial per section: header, shared, event,
// version, decode, constructor, upcast (event.tmpl), checks, check, entry
// (checks.tmpl, recursive over nested lists, maps and objects) and value
// (values.tmpl). They only range, branch and print; the one template
// function, comment, wraps prose into a doc comment. Each file starts with a
// gotype comment naming the context type it expects.
//
// The templates live in their own package because go:embed cannot reach a
// parent directory.
//
// The templates folder holds these files and nothing else: everything a
// generated file says is written here, and a change to generated code is a
// change to a template (with outboxgen's golden files updated by go test
// ./outboxgen -update).
package templates

import "embed"

// FS holds every *.tmpl file of this directory.
//
//go:embed *.tmpl
var FS embed.FS
