// Package logattr provides the log attributes that the runtime's packages
// share, so that their log lines read alike.
package logattr

import (
	"log/slog"
	"strings"
)

// Key is the key of [Error]'s attribute.
const Key = "error"

// Error returns the attribute of err: its message on one line, the lines of
// a message that has several (an errors.Join, say) separated by "; ", so
// that a line-oriented log keeps one record per line. A nil err has an
// empty message. (slog would format an error value with %+v, which prints
// the stack trace of an error wrapped by github.com/pkg/errors, as some
// Watermill adapters do.)
func Error(err error) slog.Attr {
	if err == nil {
		return slog.String(Key, "")
	}
	return slog.String(Key, OneLine(err.Error()))
}

// OneLine returns s with each line break (and the blanks around it)
// replaced by "; ".
func OneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}
