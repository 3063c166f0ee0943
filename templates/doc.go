// Package templates holds the text/template files outboxgen renders Go code
// from. It is data, not API: the generator in outboxgen/internal/codegen
// builds a plain context (names, Go types, pre-computed statements) and the
// templates only range, branch and print. Each file starts with a gotype
// comment naming the context type it expects.
//
// The templates live in their own package because go:embed cannot reach a
// parent directory.
package templates

import "embed"

// FS holds every *.tmpl file of this directory.
//
//go:embed *.tmpl
var FS embed.FS
