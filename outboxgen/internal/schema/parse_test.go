package schema

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	src := `outboxgen: 1
package: orders
compatibility: backward
enums:
  PaymentMethod: [card, wallet]
types:
  Money:
    doc: An amount.
    fields:
      value: decimal
      currency: {type: string, pattern: "^[A-Z]{3}$"}
events:
  OrderPaid:
    type: orders.order_paid
    aggregate: Order
    compatibility: full
    versions:
      2:
        breaking: true
        fields:
          amount: Money
          method: {type: PaymentMethod, values: [card]}
          lines: "list<map<string, Money>>"
          note: {type: string, optional: true}
          count: {type: int32, min: 1, max: 9, default: 3}
        removed: [cents]
      1:
        fields:
          cents: int64
`
	f, err := Parse("events.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if f.Package != "orders" || f.Compatibility != ModeBackward {
		t.Errorf("package, mode = %q, %q", f.Package, f.Compatibility)
	}
	ev := f.Events[0]
	if ev.Compatibility != ModeFull || ev.Type != "orders.order_paid" || ev.Aggregate != "Order" {
		t.Errorf("event = %+v", ev)
	}
	if got := []int{ev.Versions[0].Number, ev.Versions[1].Number}; !cmp.Equal(got, []int{1, 2}) {
		t.Errorf("versions sorted = %v", got)
	}
	v2 := ev.Versions[1]
	if !v2.Breaking || v2.Removed[0].Name != "cents" || v2.Removed[0].Pos != (Pos{Line: 26, Col: 19}) {
		t.Errorf("v2 = %+v", v2)
	}
	var types []string
	for _, fl := range v2.Fields {
		types = append(types, fl.Type.String())
	}
	if diff := cmp.Diff([]string{"Money", "PaymentMethod", "list<map<string,Money>>", "string", "int32"}, types); diff != "" {
		t.Errorf("field types (-want +got):\n%s", diff)
	}
	if got := v2.Field("method").EnumValues(); !cmp.Equal(got, []string{"card"}) {
		t.Errorf("EnumValues = %v", got)
	}
	if d := v2.Field("count").Default; d == nil || d.Value != int64(3) {
		t.Errorf("default = %+v", d)
	}
	if p := v2.Field("amount").Pos; p != (Pos{Line: 21, Col: 11}) {
		t.Errorf("amount pos = %+v", p)
	}
}

func TestParseErrorList(t *testing.T) {
	_, err := Parse("x.yaml", []byte("outboxgen: 1\nevents:\n  A:\n    typo: 1\n"))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Parse error %T, want ErrorList", err)
	}
	want := []string{
		`x.yaml:3:3: event A: missing required key "aggregate"`,
		`x.yaml:3:3: event A: missing required key "type"`,
		`x.yaml:3:3: event A: missing required key "versions"`,
		`x.yaml:4:5: event A: unknown key "typo"; did you mean "type"? (known keys: type, aggregate, doc, deprecated, compatibility, versions)`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

// TestSyntaxErrorPosition: a YAML syntax error is reported at the line that
// makes the file invalid, not where the YAML parser noticed it (often the
// start of the enclosing mapping, or the end of the file).
func TestSyntaxErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{
			name: "key indented less than its siblings",
			src:  "outboxgen: 1\nevents:\n  OrderPaid:\n    type: orders.order_paid\n   aggregate: Order\n    doc: x\n",
			want: "x.yaml:5:4: syntax error: did not find expected key",
		},
		{
			name: "unclosed flow sequence, noticed at the end of the file",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        removed: [x, y\n        fields:\n          a: string\n          b: string\n",
			want: "x.yaml:8:18: syntax error: did not find expected ',' or ']'",
		},
		{
			name: "unterminated quoted string",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: \"a.b\n    aggregate: A\n\n    doc: x\n",
			want: "x.yaml:4:11: syntax error: found unexpected end of stream",
		},
		{
			name: "valid multi-line flow mapping before the error",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: {\n      x: 1,\n      y: 2}\n    aggregate: A\n  B: [\n",
			want: "x.yaml:8:6: syntax error: did not find expected node content",
		},
		{
			name: "tab in indentation",
			src:  "outboxgen: 1\nevents:\n  A:\n\ttype: a.b\n",
			want: "x.yaml:4:1: syntax error: found character that cannot start any token",
		},
		{
			// The parser says "line 2" (the 0-based start of the
			// flow mapping); the comma missing after "x: string"
			// makes line 10 invalid.
			name: "missing comma in a multi-line flow mapping",
			src:  "outboxgen: 1\nevents:\n  A: {\n    type: a.b,\n    aggregate: A,\n    versions: {\n      1: {\n        fields: {\n          x: string\n          y: string,\n        }}}}\n",
			want: "x.yaml:10:11: syntax error: did not find expected ',' or '}'",
		},
		{
			name: "unclosed bracket inside a line",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields: {x: string, y: [}\n",
			want: "x.yaml:8:32: syntax error: did not find expected node content",
		},
		{
			// The parser says "line 7" (the mapping at line 8, 0-based).
			name: "key indented less than its siblings, deep",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: string\n         y: string\n",
			want: "x.yaml:10:10: syntax error: did not find expected key",
		},
		{
			name: "key indented more than its siblings",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: string\n           y: string\n",
			want: "x.yaml:10:13: syntax error: mapping values are not allowed in this context",
		},
		{
			name: "unclosed single quote",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: 'string\n          y: string\n",
			want: "x.yaml:9:14: syntax error: found unexpected end of stream",
		},
		{
			name: "character that cannot start a token",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: string\n          y: @string\n",
			want: "x.yaml:10:14: syntax error: found character that cannot start any token",
		},
		{
			name: "tab after the indentation",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: string\n  \t  y: string\n",
			want: "x.yaml:10:3: syntax error: found a tab character that violates indentation",
		},
		{
			name: "unknown escape in a double-quoted string",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    doc: \"a\\qb\"\n    versions: {1: {fields: {x: string}}}\n",
			want: "x.yaml:6:10: syntax error: found unknown escape character",
		},
		{
			// Brackets, quotes and comment signs inside a block
			// scalar are text, not open constructs.
			name: "block scalar with brackets and quotes before the error",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    doc: |\n      [draft] don't\n      {x\n\n      \"quoted\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: string\n         y: string\n",
			want: "x.yaml:15:10: syntax error: did not find expected key",
		},
		{
			name: "block scalar, then an unclosed quote",
			src:  "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    doc: >-\n      it's [here]\n    aggregate: 'A\n    versions: {}\n",
			want: "x.yaml:7:16: syntax error: found unexpected end of stream",
		},
		{
			name: "first line",
			src:  "outboxgen: [1\nevents: {}\n",
			want: "x.yaml:1:12: syntax error: did not find expected ',' or ']'",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.src))
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse(%q) = %v, want %s", tc.src, err, tc.want)
			}
		})
	}
}

// TestDuplicateKey: YAML accepts a repeated key in a mapping node; the schema
// parser reports it at the repeated key, naming the first.
func TestDuplicateKey(t *testing.T) {
	src := "outboxgen: 1\nevents:\n  A:\n    type: a.b\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: string\n          x: int32\n    type: a.c\n"
	_, err := Parse("x.yaml", []byte(src))
	want := []string{
		`x.yaml:10:11: A v1: fields: duplicate key "x" (first at line 9)`,
		`x.yaml:11:5: event A: duplicate key "type" (first at line 4)`,
	}
	if err == nil {
		t.Fatal("Parse accepted duplicate keys")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"order_id": "OrderID", "url_path": "URLPath", "http_status_code": "HTTPStatusCode", "point-of-sale": "PointOfSale", "3d": "X3d", "sku": "SKU", "a1_b2": "A1B2"} {
		if got := GoName(in); got != want {
			t.Errorf("GoName(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"order_id": "orderID", "type": "typeValue", "id": "id", "url_path": "urlPath", "time": "timeValue", "e": "eValue"} {
		if got := LowerGoName(in); got != want {
			t.Errorf("LowerGoName(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"OrderPaid": "order_paid", "HTTPRequest": "http_request", "Order": "order", "OrderV2Paid": "order_v2_paid"} {
		if got := SnakeName(in); got != want {
			t.Errorf("SnakeName(%q) = %q, want %q", in, got, want)
		}
	}
	for _, tt := range []struct{ in, want string }{{"packge", "package"}, {"uid", "uuid"}, {"zzzzzz", ""}, {"Mony", "Money"}} {
		if got := suggest(tt.in, []string{"package", "uuid", "Money", "events"}); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestModes(t *testing.T) {
	tests := []struct {
		m                             Mode
		backward, forward, transitive bool
	}{
		{ModeNone, false, false, false},
		{ModeBackward, true, false, false},
		{ModeBackwardTransitive, true, false, true},
		{ModeForward, false, true, false},
		{ModeForwardTransitive, false, true, true},
		{ModeFull, true, true, false},
		{ModeFullTransitive, true, true, true},
	}
	for _, tt := range tests {
		if tt.m.Backward() != tt.backward || tt.m.Forward() != tt.forward || tt.m.Transitive() != tt.transitive {
			t.Errorf("%s: backward %v forward %v transitive %v", tt.m, tt.m.Backward(), tt.m.Forward(), tt.m.Transitive())
		}
	}
}

// FuzzParse feeds arbitrary bytes to the parser: it must never panic, and
// it either returns a file or a non-empty, sorted error list.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/*/events.yaml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("outboxgen: 1\nevents: {A: {type: a, aggregate: A, versions: {1: {fields: {x: \"list<map<string,list<A>>>\"}}}}}"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f.yaml", data)
		if err == nil {
			if file == nil || len(file.Events) == 0 {
				t.Fatalf("Parse succeeded without events: %+v", file)
			}
			return
		}
		var list ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Fatalf("Parse error %T %v, want a non-empty ErrorList", err, err)
		}
	})
}

// TestDidYouMeanAliases: keys and types users bring from JSON Schema, OpenAPI
// or Go get a suggestion even when edit distance would not find one.
func TestDidYouMeanAliases(t *testing.T) {
	const knownField = " (known keys: type, doc, optional, default, min, max, max_length, pattern, values, deprecated)"
	for _, tc := range []struct {
		name, field, want string
	}{
		{"minimum", "{type: int32, minimum: 1}", `x.yaml:9:28: A v1: field "x": unknown key "minimum"; did you mean "min"?` + knownField},
		{"maximum", "{type: int64, maximum: 9}", `x.yaml:9:28: A v1: field "x": unknown key "maximum"; did you mean "max"?` + knownField},
		{"exclusiveMinimum", "{type: int64, exclusiveMinimum: 0}", `x.yaml:9:28: A v1: field "x": unknown key "exclusiveMinimum"; did you mean "min"? (min is inclusive)` + knownField},
		{"maxLength", "{type: string, maxLength: 9}", `x.yaml:9:29: A v1: field "x": unknown key "maxLength"; did you mean "max_length"?` + knownField},
		{"required", "{type: string, required: false}", `x.yaml:9:29: A v1: field "x": unknown key "required"; did you mean "optional"? (fields are required unless optional: true)` + knownField},
		{"nullable", "{type: string, nullable: true}", `x.yaml:9:29: A v1: field "x": unknown key "nullable"; did you mean "optional"?` + knownField},
		{"description", "{type: string, description: hi}", `x.yaml:9:29: A v1: field "x": unknown key "description"; did you mean "doc"?` + knownField},
		{"regex", "{type: string, regex: a}", `x.yaml:9:29: A v1: field "x": unknown key "regex"; did you mean "pattern"?` + knownField},
		{"typo still by edit distance", "{type: string, optinal: true}", `x.yaml:9:29: A v1: field "x": unknown key "optinal"; did you mean "optional"?` + knownField},
		{"integer type", "integer", `x.yaml:9:14: A v1: field "x": unknown type "integer"; did you mean "int64"? (built-in types: bool, decimal, int32, int64, string, timestamp, uuid, list<T>, map<string,T>; or a name under enums: or types:)`},
		{"time.Time type", "time.Time", `x.yaml:9:14: A v1: field "x": unknown type "time.Time"; did you mean "timestamp"? (built-in types: bool, decimal, int32, int64, string, timestamp, uuid, list<T>, map<string,T>; or a name under enums: or types:)`},
		{"float type", "float64", `x.yaml:9:14: A v1: field "x": unknown type "float64"; did you mean "decimal"? (a decimal string; there are no floats) (built-in types: bool, decimal, int32, int64, string, timestamp, uuid, list<T>, map<string,T>; or a name under enums: or types:)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "outboxgen: 1\nevents:\n  A:\n    type: a.a\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: " + tc.field + "\n"
			_, err := Parse("x.yaml", []byte(src))
			if err == nil || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
	// Event and top-level keys.
	_, err := Parse("x.yaml", []byte("outboxgen: 1\ndefinitions: {}\nevents:\n  A:\n    type: a.a\n    aggregate: A\n    description: d\n    versions:\n      1:\n        properties: {x: string}\n"))
	want := []string{
		`x.yaml:2:1: schema file: unknown key "definitions"; did you mean "types"? (known keys: outboxgen, package, compatibility, enums, types, events)`,
		`x.yaml:7:5: event A: unknown key "description"; did you mean "doc"? (known keys: type, aggregate, doc, deprecated, compatibility, versions)`,
		`x.yaml:10:9: A v1: unknown key "properties"; did you mean "fields"? (known keys: doc, breaking, draft, deprecated, fields, removed)`,
	}
	if err == nil {
		t.Fatal("Parse accepted unknown keys")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestFileIncomplete: the file is marked Incomplete exactly when its events
// could not be read at all; an error inside one event marks that event.
func TestFileIncomplete(t *testing.T) {
	ok := "outboxgen: 1\nevents:\n  A:\n    type: a.a\n    aggregate: A\n    versions:\n      1: {}\n"
	for src, want := range map[string]bool{
		"outboxgen: 1\nevents: {A: [\n": true,
		"":                              true,
		"- a\n":                         true,
		"outboxgen: 1\n":                true,
		"outboxgen: 1\nevents: [a]\n":   true,
		strings.Replace(ok, "aggregate: A", "aggregate: a b", 1): false,
		strings.Replace(ok, "a.a", "A.A", 1):                     false,
		"outboxgen: 1\nevents:\n  A: oops\n":                     false,
	} {
		f, err := Parse("events.yaml", []byte(src))
		if err == nil {
			t.Errorf("Parse(%q) accepted it", src)
			continue
		}
		if f.Incomplete != want {
			t.Errorf("Parse(%q): file Incomplete = %t, want %t (%v)", src, f.Incomplete, want, err)
		}
		if !want && (len(f.Events) != 1 || !f.Events[0].Incomplete) {
			t.Errorf("Parse(%q): events %v, want A marked Incomplete", src, f.Events)
		}
	}
	if f, err := Parse("events.yaml", []byte(ok)); err != nil || f.Incomplete {
		t.Errorf("Parse(valid) = %v, Incomplete %t", err, f.Incomplete)
	}
}
