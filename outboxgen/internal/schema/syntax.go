package schema

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// Locating YAML syntax errors.
//
// The YAML parser's message says "line N", but N is not the offending line:
// the parser keeps two marks, where the problem is and the start of the
// construct it was parsing (the enclosing block mapping, or the flow
// collection), and its error message prefers the second, and for parser
// (not scanner) errors gives it 0-based. An over-indented key on line 9
// inside a mapping that starts on line 4 is "line 3: did not find expected
// key". The exact mark is not exported, so the position is found by parsing
// prefixes of the file instead, which needs nothing from the parser but
// success or failure.

// syntaxErrorPos returns where the YAML syntax error in data is; msg is the
// parser's message (without "yaml: line N:").
//
// The line is the first line after the longest prefix of whole lines that
// parses: data is cut after each line, from the end, until a prefix parses.
// Prefixes that end inside a construct spanning several lines (a flow
// collection, a quoted string) fail too, but a longer prefix that closes the
// construct parses again, so such a construct before the error is not
// blamed. When the line found opens a flow collection ({ or [) whose
// content continues on the lines below, the search goes on inside it (see
// [flowErrorPos]). The column is the start of the line's content, a tab in
// its indentation, or, for an error the scanner reports about a character
// (a quote, an unexpected character, a colon), the first column the line
// cannot be cut after.
func syntaxErrorPos(data []byte, msg string) Pos {
	if strings.Contains(msg, "end of stream") {
		if _, q := openFlows(data); q.Line != 0 {
			return q // a quoted string that is never closed
		}
	}
	lines := strings.SplitAfter(string(data), "\n")
	// busy[i]: a flow collection or quoted string is open after line i.
	// A prefix ending there cannot parse, so it is not tried: in a file
	// written in flow style that saves a parse per line.
	busy := make([]bool, len(lines))
	openFlowsFunc(data, func(line int, open []flowOpen, quote Pos) {
		busy[line-1] = len(open) > 0 || quote.Line != 0
	})
	k, end := 0, len(data)
	for i := len(lines) - 1; i > 0; i-- {
		end -= len(lines[i])
		if !busy[i-1] && parses(data[:end]) {
			k = i
			break
		}
	}
	if k == 0 {
		end = 0
	}
	// end is where line k (0-based) starts.
	if at, ok := flowErrorPos(data, lines, k, end); ok {
		return at
	}
	line := lines[k]
	indent := len(line) - len(strings.TrimLeft(line, " \t"))
	if i := strings.IndexByte(line[:indent], '\t'); i >= 0 {
		return Pos{Line: k + 1, Col: i + 1}
	}
	at := Pos{Line: k + 1, Col: len(line) - len(strings.TrimLeft(line, " ")) + 1}
	if strings.HasPrefix(msg, "found ") || strings.HasPrefix(msg, "mapping values are not allowed") {
		// Cut the line itself: the longest part that still parses ends
		// just before the offending character.
		for c := len(strings.TrimRight(line, "\r\n")) - 1; c >= indent; c-- {
			if parses(data[:end+c]) {
				if c+1 > at.Col {
					at.Col = c + 1
				}
				break
			}
		}
	}
	return at
}

func parses(data []byte) bool {
	var n yaml.Node
	return yaml.Unmarshal(data, &n) == nil
}

// flowErrorPos handles a line k (0-based; start is its offset) that opens
// a flow collection continued on the lines below it, indented deeper:
//
//	A: {
//	  type: a.b,
//	  versions: {1: {fields: {x: string
//	    y: string}}}}      ← the missing comma is noticed here
//
// Every prefix that ends inside the collection fails, so the search above
// blames its first line. Here each such prefix is closed with the brackets
// it leaves open; the line after the longest one that then parses is the
// offending line. When that is the whole collection, or nothing inside it
// parses, the error is the collection itself (an unclosed bracket): the
// innermost bracket line k leaves open is blamed.
func flowErrorPos(data []byte, lines []string, k, start int) (Pos, bool) {
	lineEnd := start + len(lines[k])
	open, q := openFlows(data[:lineEnd])
	if q.Line != 0 || len(open) == 0 || open[0].line != k+1 {
		return Pos{}, false
	}
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	base := indent(lines[k])
	// The collection's lines: those below k indented deeper (blank and
	// comment lines included).
	last := k
	for j := k + 1; j < len(lines); j++ {
		t := strings.TrimSpace(lines[j])
		if t != "" && !strings.HasPrefix(t, "#") && indent(lines[j]) <= base {
			break
		}
		last = j
	}
	// The innermost bracket left open is the likeliest culprit.
	opener := Pos{Line: k + 1, Col: open[len(open)-1].col}
	// ends[i] is the end of line k+i.
	ends := []int{lineEnd}
	for j := k + 1; j <= last; j++ {
		ends = append(ends, ends[len(ends)-1]+len(lines[j]))
	}
	completes := func(end int) bool {
		prefix := data[:end]
		open, q := openFlows(prefix)
		if q.Line != 0 {
			return true // inside a quoted string: undecided, assume so
		}
		closed := make([]byte, 0, len(prefix)+base+len(open)+3)
		closed = append(closed, prefix...)
		if len(closed) > 0 && closed[len(closed)-1] != '\n' {
			closed = append(closed, '\n')
		}
		closed = append(closed, strings.Repeat(" ", base+1)...)
		for o := len(open) - 1; o >= 0; o-- {
			closed = append(closed, open[o].closer())
		}
		return parses(append(closed, '\n'))
	}
	if !completes(ends[0]) {
		return opener, true
	}
	// Prefixes before the offending line complete, those after it do not:
	// binary search, as a linear one costs a parse per line of what may be
	// a whole file in flow style.
	lo, hi := 0, len(ends)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if completes(ends[mid]) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == len(ends)-1 {
		return opener, true
	}
	j := k + lo + 1 // the offending line, 0-based
	return Pos{Line: j + 1, Col: indent(lines[j]) + 1}, true
}

// flowOpen is an unclosed { or [.
type flowOpen struct {
	line, col int
	ch        byte
}

func (o flowOpen) closer() byte {
	if o.ch == '{' {
		return '}'
	}
	return ']'
}

// openFlows scans YAML text for the flow collections it leaves open, and
// where the quoted string it ends inside starts (the zero Pos if none). It
// knows quotes, comments, block scalars and brackets, no more: a bracket or
// quote counts only where a node may start (after indentation, ": ", "- ",
// "? ", ",", or another bracket), so the brackets and apostrophes inside
// plain scalars (a[0], don't) do not, and the lines of a block scalar
// (doc: |) are skipped.
func openFlows(data []byte) (open []flowOpen, quoteAt Pos) {
	return openFlowsFunc(data, nil)
}

// openFlowsFunc is openFlows, calling atEOL (when not nil) at the end of
// every line with the line's number and the state after it.
func openFlowsFunc(data []byte, atEOL func(line int, open []flowOpen, quoteAt Pos)) (open []flowOpen, quoteAt Pos) {
	line, col := 1, 0
	var quote byte
	prev := byte('\n') // the last character that is not a space, '\n' at a line start
	// block is the indentation of the line that started a block scalar
	// (| or >) whose content lines are being skipped, or -1.
	block, lineIndent := -1, 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		if c == '\n' {
			if atEOL != nil {
				atEOL(line, open, quoteAt)
			}
			line, col, prev = line+1, 0, '\n'
			// Measure the next line's indentation; inside a block
			// scalar, skip it when it is blank or indented deeper.
			n := 0
			for i+1+n < len(data) && data[i+1+n] == ' ' {
				n++
			}
			lineIndent = n
			if block >= 0 {
				rest := i + 1 + n
				blank := rest >= len(data) || data[rest] == '\n' || data[rest] == '\r'
				if blank || n > block {
					for i+1 < len(data) && data[i+1] != '\n' {
						i++
					}
					col = 0
					continue
				}
				block = -1
			}
			continue
		}
		if quote != 0 {
			switch {
			case quote == '"' && c == '\\' && i+1 < len(data) && data[i+1] != '\n':
				i++
				col++
			case c == quote && quote == '\'' && i+1 < len(data) && data[i+1] == '\'':
				i++
				col++
			case c == quote:
				quote, prev, quoteAt = 0, c, Pos{}
			}
			continue
		}
		nodeStart := strings.IndexByte("\n:-?,[{", prev) >= 0
		switch c {
		case ' ', '\t', '\r':
			continue
		case '#':
			if i == 0 || data[i-1] == ' ' || data[i-1] == '\t' || data[i-1] == '\n' {
				for i+1 < len(data) && data[i+1] != '\n' {
					i++
					col++
				}
				continue
			}
		case '"', '\'':
			if nodeStart {
				quote, quoteAt = c, Pos{Line: line, Col: col}
				continue
			}
		case '[', '{':
			if nodeStart {
				open = append(open, flowOpen{line: line, col: col, ch: c})
			}
		case '|', '>':
			if nodeStart && len(open) == 0 && blockHeader(data[i+1:]) {
				block = lineIndent
				prev = c
				continue
			}
		case ']', '}':
			// A closer of the other kind closes nothing: the
			// bracket it does not match stays the one to blame.
			if len(open) > 0 && open[len(open)-1].closer() == c {
				open = open[:len(open)-1]
			}
		}
		prev = c
	}
	return open, quoteAt
}

// blockHeader reports whether rest, the line after a | or >, completes a
// block scalar header: indentation and chomping indicators, then nothing
// but spaces and a comment.
func blockHeader(rest []byte) bool {
	i := 0
	for i < len(rest) && (rest[i] == '-' || rest[i] == '+' || rest[i] >= '1' && rest[i] <= '9') {
		i++
	}
	for i < len(rest) && rest[i] != '\n' {
		switch rest[i] {
		case ' ', '\t', '\r':
			i++
			continue
		case '#':
			return i > 0 && (rest[i-1] == ' ' || rest[i-1] == '\t')
		}
		return false
	}
	return true
}
