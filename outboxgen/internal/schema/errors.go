package schema

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Pos is a 1-based position in a schema file.
type Pos struct {
	Line, Col int
}

// Error is one diagnostic about a schema file.
type Error struct {
	// Path is the schema file as named on the command line.
	Path string
	// Pos is where the problem is; the zero Pos means the whole file.
	Pos Pos
	// Msg is the message, without position.
	Msg string
}

// Error returns "file:line:col: message".
func (e Error) Error() string {
	if e.Pos.Line == 0 {
		return fmt.Sprintf("%s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Pos.Line, e.Pos.Col, e.Msg)
}

// ErrorList is a list of diagnostics; it is an error when not empty.
type ErrorList []Error

// Error returns one diagnostic per line, in order.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Sort orders the list by file, position, then message, and drops exact
// duplicates, so output is deterministic.
func (l ErrorList) Sort() ErrorList {
	slices.SortStableFunc(l, func(a, b Error) int {
		return cmp.Or(
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.Compact(l)
}

// Err returns the sorted list, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l.Sort()
}
