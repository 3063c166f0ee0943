// Package codegen turns a parsed schema into Go source: one file per event
// plus one shared file per schema, rendered from the embedded templates of
// package templates and formatted with go/format.
//
// # One way of emitting code
//
// Every declaration and statement is written by a template partial; this
// package never formats Go code itself. It builds a plain context (see
// context.go): names, Go types, literals, wrapped doc comments, and
// validation as a tree of [Check] values whose Kind picks the partial that
// writes it (templates/checks.tmpl renders the tree recursively). Templates
// only range, branch and print.
//
// Template partials were chosen over a protoc-gen-go style P() emitter
// because most of a generated file is fixed text with a few holes, which
// reads best as the code it produces; the project's templates package and
// its gotype comments already hold them; and the recursive part (checks of
// nested lists, maps and objects) is a small tree a partial can walk. A P()
// emitter would interleave that fixed text with Go string literals again,
// the very mixture this package moved away from.
//
// # What the output promises
//
// The output reads like careful hand-written Go: gofmt'd, doc comments
// wrapped at 80 columns, Go initialisms in names, and validation that
// builds an error (and its JSON path) only on the failing branch, so that
// Validate of a valid event does not allocate. Helpers the output calls
// live in github.com/gooutbox/outbox/runtime/outboxgenrt, guarded by
// outboxgenrt.GeneratedCodeVersion2.
//
// Output depends only on the schema and the [Options], never on map order,
// time or paths outside the module, so a second run changes no byte.
package codegen

import (
	"bytes"
	"fmt"
	"go/format"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
	"github.com/gooutbox/outbox/templates"
)

// Options configure one generation.
type Options struct {
	// Package is the Go package name of the generated files.
	Package string
	// Source is the schema path written in each file's header
	// (module-relative, slash-separated).
	Source string
	// SharedName is the name of the shared file without ".gen.go";
	// usually the schema file's base name ("events").
	SharedName string
}

// Output is one generated file.
type Output struct {
	// Name is the file name (no directory), ending in ".gen.go".
	Name string
	Data []byte
}

// Suffix ends the name of every generated file.
const Suffix = ".gen.go"

// Generator renders schemas. It is safe for concurrent use.
type Generator struct {
	tmpl *template.Template
}

// New parses the embedded templates.
func New() (*Generator, error) {
	funcs := template.FuncMap{
		// comment renders paragraphs as a wrapped doc comment block.
		"comment": func(paras ...string) string { return comment("", paras...) },
	}
	t, err := template.New("outboxgen").Funcs(funcs).ParseFS(templates.FS, "*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse templates: %w", err)
	}
	return &Generator{tmpl: t}, nil
}

// FileNames returns the names of the files [Generator.Generate] writes for
// f, shared file first, and an error when two would collide.
func FileNames(f *schema.File, opt Options) ([]string, error) {
	names := []string{opt.SharedName + Suffix}
	for _, ev := range f.Events {
		n := schema.SnakeName(ev.Name) + Suffix
		if slices.Contains(names, n) {
			return nil, fmt.Errorf("%s: event %s: its file %s collides with another generated file; rename the event or the schema file", f.Path, ev.Name, n)
		}
		names = append(names, n)
	}
	return names, nil
}

// Generate renders every file of f. The schema must have passed the
// compatibility check (contiguous versions, generatable upcasters).
func (g *Generator) Generate(f *schema.File, opt Options) ([]Output, error) {
	names, err := FileNames(f, opt)
	if err != nil {
		return nil, err
	}
	b := &builder{file: f, opt: opt, patterns: map[string]string{}, objectChecks: map[*schema.Object]bool{}, entryNames: map[string]bool{}}
	for _, o := range f.Types {
		b.objectHasChecks(o, nil)
	}
	var outs []Output
	// Events first: they register the patterns the shared file declares.
	for i, ev := range f.Events {
		ctx, err := b.event(ev)
		if err != nil {
			return nil, err
		}
		ctx.Name = names[i+1]
		out, err := g.render("event", ctx)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
	}
	shared := b.shared()
	shared.Name = names[0]
	out, err := g.render("shared", shared)
	if err != nil {
		return nil, err
	}
	return append([]Output{out}, outs...), nil
}

func (g *Generator) render(name string, f *File) (Output, error) {
	var buf bytes.Buffer
	if err := g.tmpl.ExecuteTemplate(&buf, name, f); err != nil {
		return Output{}, fmt.Errorf("render %s: %w", f.Name, err)
	}
	src, err := format.Source(buf.Bytes())
	if err != nil {
		return Output{}, fmt.Errorf("format %s: %w (this is an outboxgen bug)\n%s", f.Name, err, numbered(buf.String()))
	}
	return Output{Name: f.Name, Data: src}, nil
}

func numbered(src string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		lines[i] = fmt.Sprintf("%5d  %s", i+1, l)
	}
	return strings.Join(lines, "\n")
}

type builder struct {
	file     *schema.File
	opt      Options
	patterns map[string]string // pattern → var name
	order    []string          // patterns in order of first use
	// objectChecks memoises whether an object type has constraints.
	objectChecks map[*schema.Object]bool
	// entryNames are the Entry functions named so far (package-wide).
	entryNames map[string]bool
	// imports of the file being built.
	imports map[string]bool
}

func (b *builder) use(pkg string) { b.imports[pkg] = true }

func (b *builder) importList() []Import {
	var std, other []string
	for p := range b.imports {
		if strings.Contains(strings.Split(p, "/")[0], ".") {
			other = append(other, p)
		} else {
			std = append(std, p)
		}
	}
	slices.Sort(std)
	slices.Sort(other)
	var out []Import
	for _, p := range std {
		out = append(out, Import{Path: p})
	}
	if len(std) > 0 && len(other) > 0 {
		out = append(out, Import{Blank: true})
	}
	for _, p := range other {
		out = append(out, Import{Path: p})
	}
	return out
}

const (
	runtimePkg = "github.com/gooutbox/outbox/runtime"
	genrtPkg   = "github.com/gooutbox/outbox/runtime/outboxgenrt"
	uuidPkg    = "github.com/google/uuid"
)

func (b *builder) shared() *File {
	b.imports = map[string]bool{runtimePkg: true, genrtPkg: true}
	s := &Shared{}
	for _, e := range b.file.Enums {
		en := Enum{Name: e.Name, Doc: comment("", fmt.Sprintf("%s is an enumeration of the schema.", e.Name), e.Doc)}
		for _, v := range e.Values {
			en.Values = append(en.Values, Enum{}.value(e.Name, v))
		}
		s.Enums = append(s.Enums, en)
	}
	for _, o := range b.file.Types {
		obj := Object{
			Name: o.Name,
			Doc:  comment("", fmt.Sprintf("%s is an object type of the schema.", o.Name), o.Doc),
		}
		for _, f := range o.Fields {
			obj.Fields = append(obj.Fields, b.structField(f))
		}
		if b.objectChecks[o] {
			sc := checkScope{owner: o.Name, entries: &s.Entries}
			for _, f := range o.Fields {
				obj.Checks = append(obj.Checks, b.fieldChecks(sc, "o", f)...)
			}
		}
		s.Objects = append(s.Objects, obj)
		sh := b.shape(o.Fields, nil)
		sh.Name = o.Name
		s.Shapes = append(s.Shapes, sh)
	}
	for _, p := range b.order {
		s.Patterns = append(s.Patterns, Pattern{Var: b.patterns[p], Literal: goString(p)})
	}
	if len(s.Patterns) > 0 {
		b.use("regexp")
	}
	for _, ev := range b.file.Events {
		s.Events = append(s.Events, ev.Name)
	}
	return &File{Source: b.opt.Source, Package: b.opt.Package, Imports: b.importList(), Shared: s}
}

func (Enum) value(enum, v string) EnumValue {
	return EnumValue{Const: enum + schema.GoName(v), Literal: strconv.Quote(v)}
}

func (b *builder) event(ev *schema.Event) (*File, error) {
	b.imports = map[string]bool{runtimePkg: true, genrtPkg: true, "time": true, "fmt": true, "encoding/json": true}
	latest := ev.Latest()
	name := ev.Name
	ctx := &Event{Name: name, TypeLit: strconv.Quote(ev.Type), Latest: latest.Number}
	aggregate := ""
	if ev.Aggregate != "" {
		aggregate = fmt.Sprintf(" Events of this type are recorded by the %s aggregate.", ev.Aggregate)
	}
	ctx.TypeDoc = comment("", fmt.Sprintf("%sType is the wire type of %s, stored in the outbox event_type column; it never changes across versions.%s", name, name, aggregate))
	ctx.AliasDoc = comment("", fmt.Sprintf("%s is the latest version of %s (v%d). Aggregates record it through New%s, so a new version surfaces as a compile error wherever the event is built.", name, ev.Type, latest.Number, name),
		ev.Doc, deprecatedPara(ev.Deprecated, "do not record new events of this kind."))
	ctx.NewerDoc = comment("", fmt.Sprintf("DecodeNewer%s decodes a payload of a version newer than %sLatestVersion as the latest version, for a writer that declared it readable by this version: its runtime.MetadataMinReaderVersion header is at most %sLatestVersion. runtime.Registry.DecodeEnvelope checks the header and calls it; Register adds it. A version this code knows is decoded by Decode%s.", name, name, name, name),
		"Keys this version does not know are ignored. A value it does not know, such as a new enum value, is an error (a *runtime.DecodeError), never mapped to a zero value; the compatibility check keeps such values out of payloads declared readable by older versions.")
	ctx.LatestDoc = comment("", fmt.Sprintf("%sLatestVersion is the version New%s records and Decode%s upcasts every older version to.", name, name, name))

	for i, v := range ev.Versions {
		vctx, err := b.version(ev, v, &ctx.Entries)
		if err != nil {
			return nil, err
		}
		for j := i; j < len(ev.Versions)-1; j++ {
			next := ev.Versions[j+1]
			vctx.Chain = append(vctx.Chain, Step{
				Func:        upcastName(ev, ev.Versions[j], next),
				From:        ev.Versions[j].Number,
				To:          next.Number,
				HandWritten: next.Breaking,
			})
		}
		ctx.Versions = append(ctx.Versions, vctx)
		if i > 0 && !v.Breaking {
			up, err := b.upcast(ev, ev.Versions[i-1], v)
			if err != nil {
				return nil, err
			}
			ctx.Upcasts = append(ctx.Upcasts, up)
		}
	}
	ctx.Constructor = b.constructor(ev)
	ctx.DecodeDoc = decodeDoc(ev)
	return &File{Source: b.opt.Source, Package: b.opt.Package, Imports: b.importList(), Event: ctx}, nil
}

func upcastName(ev *schema.Event, from, to *schema.Version) string {
	return fmt.Sprintf("upcast%sV%dToV%d", ev.Name, from.Number, to.Number)
}

func decodeDoc(ev *schema.Event) string {
	var steps []string
	for i := 1; i < len(ev.Versions); i++ {
		from, to := ev.Versions[i-1], ev.Versions[i]
		how := "generated"
		if to.Breaking {
			how = fmt.Sprintf("hand-written: v%d is breaking, so this package must define func %s(%sV%d) (%sV%d, error), which maps the fields; Decode%s sets the result's EventVersion, and its OccurredAt when left zero", to.Number, upcastName(ev, from, to), ev.Name, from.Number, ev.Name, to.Number, ev.Name)
		}
		steps = append(steps, fmt.Sprintf("v%d→v%d by %s (%s)", from.Number, to.Number, upcastName(ev, from, to), how))
	}
	chain := ""
	if len(steps) > 0 {
		chain = " Upcasters: " + strings.Join(steps, "; ") + "."
	}
	return comment("", fmt.Sprintf("Decode%s decodes a payload written as the given version of %s, validates it and upcasts it to the latest version.%s", ev.Name, ev.Type, chain),
		"It returns a *runtime.DecodeError for a malformed or invalid payload or a failed upcast, and a *runtime.UnknownVersionError for a version this code was not generated with; UnknownVersionError.Newer reports a payload from a newer producer, to be retried or parked rather than dropped.")
}

func (b *builder) version(ev *schema.Event, v *schema.Version, entries *[]Entry) (Version, error) {
	name := fmt.Sprintf("%sV%d", ev.Name, v.Number)
	var state string
	switch {
	case v.Breaking:
		state = fmt.Sprintf(" It is breaking: it starts a new compatibility line and is upcast from v%d by a hand-written function.", v.Number-1)
	case v.Number > 1:
		state = fmt.Sprintf(" It is compatible with v%d (%s).", v.Number-1, ev.Compatibility)
	}
	vc := Version{
		Name:      name,
		Event:     ev.Name,
		Type:      ev.Type,
		Number:    v.Number,
		IsLatest:  v == ev.Latest(),
		MinReader: minReader(ev, v),
		Doc: comment("", fmt.Sprintf("%s is version %d of %s.%s", name, v.Number, ev.Type, state),
			ev.Doc, v.Doc, deprecatedPara(v.Deprecated, "do not record new events of this version.")),
	}
	if vc.MinReader < v.Number {
		vc.MinReaderDoc = comment("", fmt.Sprintf("EventMinReader returns %d: a reader generated at version %d or later of %s decodes a version %d payload directly, as the %s compatibility mode guarantees. runtime.NewEnvelope sends it in the min_reader_version header, so that older consumers read this version.", vc.MinReader, vc.MinReader, ev.Type, v.Number, ev.Compatibility))
	} else {
		vc.MinReaderDoc = comment("", fmt.Sprintf("EventMinReader returns %d: only a reader generated at version %d or later of %s decodes a version %d payload.", v.Number, v.Number, ev.Type, v.Number))
	}
	sc := checkScope{owner: name, top: true, entries: entries}
	vc.Fields = append(vc.Fields,
		StructField{Name: "EventVersion", Type: "int", Tag: `json:"event_version"`, Doc: comment("\t", fmt.Sprintf("EventVersion is the schema version of the payload, always %d.", v.Number))},
		StructField{Name: "OccurredAt", Type: "time.Time", Tag: `json:"occurred_at"`, Doc: comment("\t", "OccurredAt is when the event occurred, in UTC with microsecond precision.")},
	)
	for _, f := range v.Fields {
		vc.Fields = append(vc.Fields, b.structField(f))
		vc.Checks = append(vc.Checks, b.fieldChecks(sc, "e", f)...)
		if !f.Optional && f.Default != nil {
			vc.Defaults = append(vc.Defaults, Assign{Key: strconv.Quote(f.Name), Field: schema.GoName(f.Name), Value: b.defaultValue(f)})
		}
	}
	vc.Shape = b.shape(v.Fields, []string{`"event_version"`, `"occurred_at"`})
	vc.Objects = "nil"
	if len(b.file.Types) > 0 {
		vc.Objects = "outboxgenObjects"
	}
	return vc, nil
}

// shape is the Shape of an object with the given fields, after the
// required keys in keys. A required list or map may be absent or null on
// the wire (a nil slice or map marshals as null): it decodes as empty.
// Every other required key must be present with a non-null value, in
// nested objects too.
func (b *builder) shape(fields []*schema.Field, keys []string) Shape {
	sh := Shape{Required: keys}
	for _, f := range fields {
		if !f.Optional && f.Type.Kind != schema.List && f.Type.Kind != schema.Map {
			sh.Required = append(sh.Required, strconv.Quote(f.Name))
		}
		containers := ""
		t := f.Type
		for ; t.Kind == schema.List || t.Kind == schema.Map; t = t.Elem {
			if t.Kind == schema.List {
				containers += "l"
			} else {
				containers += "m"
			}
		}
		if t.Kind == schema.ObjectKind {
			sh.Nested = append(sh.Nested, NestedShape{Key: strconv.Quote(f.Name), Containers: strconv.Quote(containers), Object: slices.Index(b.file.Types, t.Object), Type: t.Object.Name})
		}
	}
	return sh
}

// minReader is the oldest version whose reader can decode v directly: the
// start of v's compatibility line when the mode guarantees forward
// compatibility transitively, the previous version when only against the
// previous one, else v itself.
func minReader(ev *schema.Event, v *schema.Version) int {
	if !ev.Compatibility.Forward() || v.Breaking || v.Number == 1 {
		return v.Number
	}
	start := 1
	for _, w := range ev.Versions {
		if w.Number <= v.Number && w.Breaking {
			start = w.Number
		}
	}
	if ev.Compatibility.Transitive() {
		return start
	}
	return max(start, v.Number-1)
}

// deprecatedPara is the Deprecated paragraph of a doc comment: the schema's
// note, or generic advice when the schema only says deprecated: true.
func deprecatedPara(note, advice string) string {
	if note == "" {
		return ""
	}
	if note == "deprecated" {
		return "Deprecated: " + advice
	}
	return "Deprecated: " + note
}

func (b *builder) structField(f *schema.Field) StructField {
	tag := `json:"` + f.Name
	if f.Optional {
		tag += ",omitempty"
	}
	tag += `"`
	first := fmt.Sprintf("%s is %s.", schema.GoName(f.Name), describeField(f))
	return StructField{
		Name: schema.GoName(f.Name),
		Type: b.goType(f.Type, f.Optional),
		Tag:  tag,
		Doc: comment("\t", first, f.Doc, deprecatedPara(f.Deprecated,
			fmt.Sprintf("new events should leave %s unset; it is kept so that older payloads still decode.", schema.GoName(f.Name)))),
	}
}

// describeField says what a field holds, from its type and constraints.
func describeField(f *schema.Field) string {
	var parts []string
	if f.Optional {
		parts = append(parts, "optional")
	} else {
		parts = append(parts, "required")
	}
	parts = append(parts, f.Type.String())
	var cons []string
	if f.Min != nil {
		cons = append(cons, fmt.Sprintf(">= %d", *f.Min))
	}
	if f.Max != nil {
		cons = append(cons, fmt.Sprintf("<= %d", *f.Max))
	}
	if f.MaxLength != nil {
		cons = append(cons, fmt.Sprintf("at most %d characters", *f.MaxLength))
	}
	if f.Pattern != "" {
		cons = append(cons, "matching "+f.Pattern)
	}
	if f.Values != nil {
		cons = append(cons, "one of "+strings.Join(f.Values, ", "))
	}
	if f.Default != nil {
		switch f.Default.Value.(type) {
		case []any:
			cons = append(cons, "default []")
		case map[string]any:
			cons = append(cons, "default {}")
		case string:
			cons = append(cons, fmt.Sprintf("default %q", f.Default.Value))
		default:
			cons = append(cons, fmt.Sprintf("default %v", f.Default.Value))
		}
	}
	s := "the " + strings.Join(parts, " ") + " field " + f.Name
	if len(cons) > 0 {
		s += " (" + strings.Join(cons, "; ") + ")"
	}
	return s
}

// pointerKind reports whether an optional value of t is a pointer (lists
// and maps use nil instead).
func pointerKind(t *schema.Type) bool { return t.Kind != schema.List && t.Kind != schema.Map }

func (b *builder) goType(t *schema.Type, optional bool) string {
	var s string
	switch t.Kind {
	case schema.String, schema.Decimal:
		s = "string"
	case schema.Bool:
		s = "bool"
	case schema.Int32:
		s = "int32"
	case schema.Int64:
		s = "int64"
	case schema.UUID:
		b.use(uuidPkg)
		s = "uuid.UUID"
	case schema.Timestamp:
		b.use("time")
		s = "time.Time"
	case schema.EnumKind:
		s = t.Enum.Name
	case schema.ObjectKind:
		s = t.Object.Name
	case schema.List:
		s = "[]" + b.goType(t.Elem, false)
	case schema.Map:
		s = "map[string]" + b.goType(t.Elem, false)
	}
	if optional && pointerKind(t) {
		s = "*" + s
	}
	return s
}

// defaultValue is the Go value of f's default.
func (b *builder) defaultValue(f *schema.Field) Value {
	v := f.Default.Value
	switch f.Type.Kind {
	case schema.EnumKind:
		return Value{Kind: "literal", Lit: f.Type.Enum.Name + schema.GoName(v.(string))}
	case schema.String, schema.Decimal:
		return Value{Kind: "literal", Lit: strconv.Quote(v.(string))}
	case schema.UUID:
		b.use(uuidPkg)
		return Value{Kind: "uuid", Lit: strconv.Quote(v.(string))}
	case schema.Timestamp:
		b.use("time")
		t, _ := time.Parse(time.RFC3339Nano, v.(string))
		t = t.UTC()
		return Value{Kind: "time", Time: []int{t.Year(), int(t.Month()), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond()}}
	case schema.List, schema.Map:
		return Value{Kind: "empty", Type: b.goType(f.Type, false)}
	}
	return Value{Kind: "literal", Lit: fmt.Sprint(v)}
}

func (b *builder) constructor(ev *schema.Event) Constructor {
	latest := ev.Latest()
	var c Constructor
	var optional []string
	for _, f := range latest.Fields {
		g := schema.GoName(f.Name)
		switch {
		case f.Optional:
			optional = append(optional, g)
		case f.Default != nil:
			c.Assigns = append(c.Assigns, Assign{Field: g, Value: b.defaultValue(f)})
		default:
			p := schema.LowerGoName(f.Name)
			c.Params = append(c.Params, Param{Name: p, Type: b.goType(f.Type, false)})
			c.Assigns = append(c.Assigns, Assign{Field: g, Value: Value{X: p}})
		}
	}
	opt := ""
	if len(optional) > 0 {
		opt = " Optional fields (" + strings.Join(optional, ", ") + ") are left unset; assign them on the result."
	}
	c.Doc = comment("", fmt.Sprintf("New%s returns a new %s (v%d) that occurred at clk.Now(), in UTC truncated to microseconds so that it survives a PostgreSQL round trip. Required fields are parameters in schema order; fields with a default get it.%s Call Validate (the outbox does) to check constraints.", ev.Name, ev.Name, latest.Number, opt))
	return c
}

// comment renders paragraphs as a doc comment block; empty paragraphs are
// skipped.
func comment(indent string, paras ...string) string {
	var b strings.Builder
	first := true
	for _, p := range paras {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !first {
			b.WriteString(indent + "//\n")
		}
		first = false
		for _, line := range strings.Split(p, "\n") {
			line = strings.TrimRight(line, " \t")
			if line == "" {
				b.WriteString(indent + "//\n")
				continue
			}
			for _, w := range wrap(line, 77-len(indent)*4) {
				b.WriteString(indent + "// " + w + "\n")
			}
		}
	}
	return b.String()
}

// goString quotes s as a raw string literal when possible, for patterns.
func goString(s string) string {
	if !strings.Contains(s, "`") {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

// wrap breaks a line at spaces so that each part is at most width bytes
// where possible; indented lines (code in docs) are kept whole.
func wrap(line string, width int) []string {
	if len(line) <= width || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
		return []string{line}
	}
	var out []string
	cur := ""
	for _, w := range strings.Fields(line) {
		if cur != "" && len(cur)+1+len(w) > width {
			out = append(out, cur)
			cur = ""
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	return append(out, cur)
}
