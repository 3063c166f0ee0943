package schema

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.yaml.in/yaml/v3"
)

var (
	goTypeNameRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	fieldNameRE  = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	wireTypeRE   = regexp.MustCompile(`^[a-z][a-z0-9_]*([.-][a-z0-9_]+)*$`)
	yamlLineRE   = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	// DecimalRE is what a decimal string must match.
	DecimalRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
)

// DecimalPattern is the source of [DecimalRE], repeated in generated code.
const DecimalPattern = `^-?[0-9]+(\.[0-9]+)?$`

// ReservedFields are the JSON names every event version carries implicitly.
var ReservedFields = []string{"event_version", "occurred_at"}

// reservedGoNames are Go names of generated fields and methods on events.
var reservedGoNames = []string{"EventVersion", "OccurredAt", "EventKey", "EventTime", "EventMinReader", "Validate"}

var (
	topKeys     = []string{"outboxgen", "package", "compatibility", "enums", "types", "events"}
	enumKeys    = []string{"doc", "values"}
	objectKeys  = []string{"doc", "fields"}
	eventKeys   = []string{"type", "aggregate", "doc", "deprecated", "compatibility", "versions"}
	versionKeys = []string{"doc", "breaking", "draft", "deprecated", "fields", "removed"}
	fieldKeys   = []string{"type", "doc", "optional", "default", "min", "max", "max_length", "pattern", "values", "deprecated"}
)

// Parse parses and resolves a schema file. path is used in diagnostics
// only. On failure the error is an [ErrorList] holding every problem found,
// and the file is the part that could be parsed, with the events, versions,
// enums and types that had errors marked Incomplete: the compatibility
// checker still checks the rest, so one run reports every problem. Only a
// nil error makes the file fit for code generation.
func Parse(path string, data []byte) (*File, error) {
	p := &parser{
		path:    path,
		file:    &File{Path: path, Compatibility: ModeFullTransitive},
		enums:   map[string]*Enum{},
		objects: map[string]*Object{},
	}
	p.parse(data)
	if err := p.errs.Err(); err != nil {
		p.markIncomplete()
		return p.file, err
	}
	return p.file, nil
}

// markIncomplete propagates parse errors to what depends on them: an object
// type using an incomplete type, a version whose fields use one, and every
// event that inherits the file's mode when that mode was unreadable.
func (p *parser) markIncomplete() {
	for changed := true; changed; {
		changed = false
		for _, o := range p.file.Types {
			if !o.Incomplete && usesIncomplete(o.Fields) {
				o.Incomplete, changed = true, true
			}
		}
	}
	for _, ev := range p.file.Events {
		if p.badMode && !ev.ownMode {
			ev.Incomplete = true
		}
		for _, v := range ev.Versions {
			if usesIncomplete(v.Fields) {
				v.Incomplete = true
			}
		}
	}
}

func usesIncomplete(fs []*Field) bool {
	for _, f := range fs {
		t := f.Type.Innermost()
		if t.Enum != nil && t.Enum.Incomplete || t.Object != nil && t.Object.Incomplete {
			return true
		}
	}
	return false
}

type parser struct {
	path    string
	errs    ErrorList
	file    *File
	enums   map[string]*Enum
	objects map[string]*Object
	// badMode records an unreadable file-level compatibility mode.
	badMode bool
}

type entry struct {
	key, val *yaml.Node
}

func pos(n *yaml.Node) Pos { return Pos{Line: n.Line, Col: n.Column} }

func (p *parser) errorf(at Pos, format string, args ...any) {
	p.errs = append(p.errs, Error{Path: p.path, Pos: at, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) parse(data []byte) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			msg = m[2]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		p.errorf(syntaxErrorPos(data, msg), "syntax error: %s", msg)
		p.file.Incomplete = true
		return
	}
	if len(doc.Content) == 0 {
		p.errorf(Pos{Line: 1, Col: 1}, "empty schema file; expected a mapping starting with \"outboxgen: %d\"", FormatVersion)
		p.file.Incomplete = true
		return
	}
	top := p.mapping(doc.Content[0], "schema file", topKeys, []string{"outboxgen", "events"}, nil)
	if top == nil {
		p.file.Incomplete = true
		return
	}
	if e, ok := top["outboxgen"]; ok {
		if v, ok := p.int(e, "outboxgen"); ok && v != FormatVersion {
			p.errorf(pos(e.val), "unsupported outboxgen format version %d; this outboxgen reads version %d", v, FormatVersion)
		}
	}
	if e, ok := top["package"]; ok {
		if s, ok := p.str(e, "package"); ok {
			if !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(s) {
				p.errorf(pos(e.val), "package %q is not a valid Go package name", s)
			}
			p.file.Package, p.file.PackagePos = s, pos(e.val)
		}
	}
	if e, ok := top["compatibility"]; ok {
		if m, ok := p.mode(e, ""); ok {
			p.file.Compatibility = m
		} else {
			p.badMode = true
		}
	}
	// Declare enums and object types first, so fields can refer to them in
	// any order.
	if e, ok := top["enums"]; ok {
		for _, en := range p.entries(e.val, "enums") {
			n := len(p.errs)
			p.enum(en)
			if e := p.enums[en.key.Value]; e != nil && len(p.errs) > n {
				e.Incomplete = true
			}
		}
	}
	var objectBodies []entry
	if e, ok := top["types"]; ok {
		for _, en := range p.entries(e.val, "types") {
			name := en.key.Value
			if !goTypeNameRE.MatchString(name) {
				p.errorf(pos(en.key), "type name %q must be an exported Go identifier (e.g. Money)", name)
			}
			if _, dup := p.enums[name]; dup {
				p.errorf(pos(en.key), "type %s: name already used by an enum", name)
				continue
			}
			o := &Object{Name: name, Pos: pos(en.key)}
			p.objects[name] = o
			p.file.Types = append(p.file.Types, o)
			objectBodies = append(objectBodies, en)
		}
	}
	for i, en := range objectBodies {
		n := len(p.errs)
		p.object(p.file.Types[i], en)
		if len(p.errs) > n {
			p.file.Types[i].Incomplete = true
		}
	}
	p.checkCycles()
	e, ok := top["events"]
	if !ok || deref(e.val).Kind != yaml.MappingNode && deref(e.val).Tag != "!!null" {
		p.file.Incomplete = true // reported by mapping or entries
	}
	if ok {
		evs := p.entries(e.val, "events")
		if len(evs) == 0 && (e.val.Kind == yaml.MappingNode || e.val.Tag == "!!null") {
			p.errorf(pos(e.val), "events: at least one event is required")
		}
		for _, en := range evs {
			n := len(p.errs)
			versionErrs := p.event(en)
			if len(p.errs)-n > versionErrs && len(p.file.Events) > 0 {
				if ev := p.file.Events[len(p.file.Events)-1]; ev.Pos == pos(en.key) {
					ev.Incomplete = true
				}
			}
		}
	}
	p.checkNames()
}

// mapping checks that n is a mapping with known, unique scalar keys and the
// required ones present. It returns nil after reporting when n is not a
// mapping.
func (p *parser) mapping(n *yaml.Node, what string, known, required []string, owner *yaml.Node) map[string]entry {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "%s must be a mapping, got %s", what, describe(n))
		return nil
	}
	out := map[string]entry{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(pos(k), "%s: keys must be strings", what)
			continue
		}
		if prev, dup := out[k.Value]; dup {
			p.errorf(pos(k), "%s: duplicate key %q (first at line %d)", what, k.Value, prev.key.Line)
			continue
		}
		if !slices.Contains(known, k.Value) {
			p.errorf(pos(k), "%s: unknown key %q%s (known keys: %s)", what, k.Value, didYouMean(k.Value, known), strings.Join(known, ", "))
			continue
		}
		out[k.Value] = entry{key: k, val: v}
	}
	at := pos(n)
	if owner != nil {
		at = pos(owner)
	}
	for _, r := range required {
		if _, ok := out[r]; !ok {
			p.errorf(at, "%s: missing required key %q", what, r)
		}
	}
	return out
}

// entries returns the key/value pairs of a user-keyed mapping (events,
// fields, ...) in order, reporting duplicates. An empty or null value gives
// no entries.
func (p *parser) entries(n *yaml.Node, what string) []entry {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "%s must be a mapping, got %s", what, describe(n))
		return nil
	}
	var out []entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(pos(k), "%s: keys must be strings", what)
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.errorf(pos(k), "%s: duplicate key %q (first at line %d)", what, k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, entry{key: k, val: v})
	}
	return out
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return deref(n.Content[0])
	}
	return n
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		}
		return fmt.Sprintf("%s %s", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "an alias"
}

func (p *parser) str(e entry, what string) (string, bool) {
	if e.val.Kind != yaml.ScalarNode || e.val.Tag != "!!str" {
		p.errorf(pos(e.val), "%s must be a string, got %s", what, describe(e.val))
		return "", false
	}
	return e.val.Value, true
}

func (p *parser) int(e entry, what string) (int64, bool) {
	if e.val.Kind != yaml.ScalarNode || e.val.Tag != "!!int" {
		p.errorf(pos(e.val), "%s must be an integer, got %s", what, describe(e.val))
		return 0, false
	}
	v, err := strconv.ParseInt(e.val.Value, 0, 64)
	if err != nil {
		p.errorf(pos(e.val), "%s: %q is out of range for int64", what, e.val.Value)
		return 0, false
	}
	return v, true
}

func (p *parser) bool(e entry, what string) (bool, bool) {
	if e.val.Kind != yaml.ScalarNode || e.val.Tag != "!!bool" {
		p.errorf(pos(e.val), "%s must be true or false, got %s", what, describe(e.val))
		return false, false
	}
	var b bool
	if err := e.val.Decode(&b); err != nil {
		p.errorf(pos(e.val), "%s must be true or false", what)
		return false, false
	}
	return b, true
}

// deprecated reads `deprecated: true` or `deprecated: "use X instead"`.
func (p *parser) deprecated(e entry) string {
	if e.val.Kind == yaml.ScalarNode && e.val.Tag == "!!bool" {
		if b, ok := p.bool(e, "deprecated"); ok && b {
			return "deprecated"
		}
		return ""
	}
	s, ok := p.str(e, "deprecated")
	if ok && s == "" {
		return "deprecated"
	}
	return s
}

// mode reads a compatibility mode; what names the owner in messages ("" for
// the file's default).
func (p *parser) mode(e entry, what string) (Mode, bool) {
	s, ok := p.str(e, what+"compatibility")
	if !ok {
		return "", false
	}
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
		if string(m) == s {
			return m, true
		}
	}
	p.errorf(pos(e.val), "%sunknown compatibility mode %q%s (one of: %s)", what, s, didYouMean(s, names), strings.Join(names, ", "))
	return "", false
}

func (p *parser) stringList(n *yaml.Node, what string) ([]Name, bool) {
	n = deref(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(pos(n), "%s must be a list of strings, got %s", what, describe(n))
		return nil, false
	}
	out := make([]Name, 0, len(n.Content))
	seen := map[string]bool{}
	ok := true
	for _, c := range n.Content {
		c = deref(c)
		if c.Kind != yaml.ScalarNode || c.Tag != "!!str" {
			p.errorf(pos(c), "%s: entries must be strings, got %s", what, describe(c))
			ok = false
			continue
		}
		if seen[c.Value] {
			p.errorf(pos(c), "%s: duplicate value %q", what, c.Value)
			ok = false
			continue
		}
		seen[c.Value] = true
		out = append(out, Name{Name: c.Value, Pos: pos(c)})
	}
	return out, ok
}

func (p *parser) enum(en entry) {
	name := en.key.Value
	if !goTypeNameRE.MatchString(name) {
		p.errorf(pos(en.key), "enum name %q must be an exported Go identifier (e.g. PaymentMethod)", name)
	}
	e := &Enum{Name: name, Pos: pos(en.key)}
	valuesNode := en.val
	if en.val.Kind == yaml.MappingNode {
		m := p.mapping(en.val, "enum "+name, enumKeys, []string{"values"}, en.key)
		if d, ok := m["doc"]; ok {
			e.Doc, _ = p.str(d, "doc")
		}
		v, ok := m["values"]
		if !ok {
			return
		}
		valuesNode = v.val
	}
	values, _ := p.stringList(valuesNode, "enum "+name)
	if valuesNode.Kind == yaml.SequenceNode && len(valuesNode.Content) == 0 {
		p.errorf(pos(valuesNode), "enum %s: at least one value is required", name)
	}
	consts := map[string]string{}
	for _, v := range values {
		if v.Name == "" {
			p.errorf(v.Pos, "enum %s: empty value", name)
			continue
		}
		g := GoName(v.Name)
		if prev, dup := consts[g]; dup {
			p.errorf(v.Pos, "enum %s: values %q and %q both map to the Go constant %s%s", name, prev, v.Name, name, g)
			continue
		}
		consts[g] = v.Name
		e.Values = append(e.Values, v.Name)
	}
	p.enums[name] = e
	p.file.Enums = append(p.file.Enums, e)
}

func (p *parser) object(o *Object, en entry) {
	m := p.mapping(en.val, "type "+o.Name, objectKeys, []string{"fields"}, en.key)
	if d, ok := m["doc"]; ok {
		o.Doc, _ = p.str(d, "doc")
	}
	if f, ok := m["fields"]; ok {
		o.Fields = p.fields(f.val, "type "+o.Name, false)
		if len(o.Fields) == 0 && len(p.errs) == 0 {
			p.errorf(pos(f.val), "type %s: at least one field is required", o.Name)
		}
	}
}

// event parses one event and appends it to the file (unless its body is
// not a mapping). It returns how many of the errors it reported are inside
// versions it could number: those mark the version, the rest the event.
func (p *parser) event(en entry) (versionErrs int) {
	name := en.key.Value
	if !goTypeNameRE.MatchString(name) {
		p.errorf(pos(en.key), "event name %q must be an exported Go identifier (e.g. OrderPaid)", name)
	}
	ev := &Event{Name: name, Pos: pos(en.key), Compatibility: p.file.Compatibility}
	what := "event " + name
	m := p.mapping(en.val, what, eventKeys, []string{"type", "aggregate", "versions"}, en.key)
	if m == nil {
		// Kept, marked incomplete, so that the checker knows the event
		// is still there (not "no longer in the schema").
		ev.Incomplete = true
		p.file.Events = append(p.file.Events, ev)
		return 0
	}
	if e, ok := m["type"]; ok {
		if s, ok := p.str(e, what+": type"); ok {
			if !wireTypeRE.MatchString(s) {
				p.errorf(pos(e.val), "%s: type %q must be a lower-case dotted wire name (e.g. orders.order_paid)", what, s)
			}
			ev.Type, ev.TypePos = s, pos(e.val)
		}
	}
	if e, ok := m["aggregate"]; ok {
		if s, ok := p.str(e, what+": aggregate"); ok {
			if s == "" {
				p.errorf(pos(e.val), "%s: aggregate must not be empty", what)
			} else if !goTypeNameRE.MatchString(s) {
				p.errorf(pos(e.val), "%s: aggregate %q must be an exported Go identifier, the aggregate's type name (e.g. Order)", what, s)
			}
			ev.Aggregate = s
		}
	}
	if e, ok := m["doc"]; ok {
		ev.Doc, _ = p.str(e, what+": doc")
	}
	if e, ok := m["deprecated"]; ok {
		ev.Deprecated = p.deprecated(e)
	}
	if e, ok := m["compatibility"]; ok {
		ev.ownMode = true
		if md, ok := p.mode(e, what+": "); ok {
			ev.Compatibility = md
		} else {
			ev.Incomplete = true
		}
	}
	if e, ok := m["versions"]; ok {
		vs := p.entries(e.val, what+": versions")
		if len(vs) == 0 && (e.val.Kind == yaml.MappingNode || e.val.Tag == "!!null") {
			p.errorf(pos(e.val), "%s: at least one version is required", what)
		}
		for _, v := range vs {
			n := len(p.errs)
			if ver := p.version(ev, v); ver != nil {
				if len(p.errs) > n {
					ver.Incomplete = true
					versionErrs += len(p.errs) - n
				}
				ev.Versions = append(ev.Versions, ver)
			}
		}
		slices.SortFunc(ev.Versions, func(a, b *Version) int { return a.Number - b.Number })
	}
	for _, o := range p.file.Events {
		if ev.Type != "" && o.Type == ev.Type {
			p.errorf(ev.TypePos, "%s: wire type %q is already used by event %s", what, ev.Type, o.Name)
		}
	}
	p.file.Events = append(p.file.Events, ev)
	return versionErrs
}

func (p *parser) version(ev *Event, en entry) *Version {
	n, err := strconv.Atoi(en.key.Value)
	if err != nil || en.key.Tag != "!!int" || n < 1 {
		p.errorf(pos(en.key), "event %s: version key %q must be a positive integer", ev.Name, en.key.Value)
		return nil
	}
	v := &Version{Number: n, Pos: pos(en.key)}
	what := fmt.Sprintf("%s v%d", ev.Name, n)
	m := p.mapping(en.val, what, versionKeys, nil, en.key)
	if m == nil {
		return v
	}
	if e, ok := m["doc"]; ok {
		v.Doc, _ = p.str(e, what+": doc")
	}
	if e, ok := m["breaking"]; ok {
		v.Breaking, _ = p.bool(e, what+": breaking")
		if v.Breaking && n == 1 {
			p.errorf(pos(e.val), "%s: breaking: true has no meaning on version 1", what)
		}
	}
	if e, ok := m["draft"]; ok {
		v.Draft, _ = p.bool(e, what+": draft")
	}
	if e, ok := m["deprecated"]; ok {
		v.Deprecated = p.deprecated(e)
	}
	if e, ok := m["fields"]; ok {
		v.Fields = p.fields(e.val, what, true)
	}
	if e, ok := m["removed"]; ok {
		v.Removed, _ = p.stringList(e.val, what+": removed")
	}
	return v
}

// fields parses a fields mapping. Event versions reserve the implicit
// event_version and occurred_at, and Go names their methods use.
func (p *parser) fields(n *yaml.Node, what string, isEvent bool) []*Field {
	var out []*Field
	goNames := map[string]string{}
	for _, en := range p.entries(n, what+": fields") {
		name := en.key.Value
		fwhat := fmt.Sprintf("%s: field %q", what, name)
		switch {
		case !fieldNameRE.MatchString(name):
			p.errorf(pos(en.key), "%s: field names are snake_case ([a-z][a-z0-9_]*)", fwhat)
			continue
		case isEvent && slices.Contains(ReservedFields, name):
			p.errorf(pos(en.key), "%s is implicit in every event version; remove it", fwhat)
			continue
		}
		g := GoName(name)
		if isEvent && slices.Contains(reservedGoNames, g) {
			p.errorf(pos(en.key), "%s: Go name %s collides with a generated field or method of events", fwhat, g)
			continue
		}
		if prev, dup := goNames[g]; dup {
			p.errorf(pos(en.key), "%s: Go name %s is already used by field %q", fwhat, g, prev)
			continue
		}
		goNames[g] = name
		if f := p.field(en, fwhat); f != nil {
			out = append(out, f)
		}
	}
	return out
}

func (p *parser) field(en entry, what string) *Field {
	f := &Field{Name: en.key.Value, Pos: pos(en.key)}
	var m map[string]entry
	if en.val.Kind == yaml.ScalarNode && en.val.Tag == "!!str" {
		m = map[string]entry{"type": {key: en.key, val: en.val}} // shorthand: name: type
	} else {
		m = p.mapping(en.val, what, fieldKeys, []string{"type"}, en.key)
		if m == nil {
			return nil
		}
	}
	e, ok := m["type"]
	if !ok {
		return nil
	}
	expr, ok := p.str(e, what+": type")
	if !ok {
		return nil
	}
	f.TypePos = pos(e.val)
	if f.Type = p.typeExpr(expr, f.TypePos, what); f.Type == nil {
		return nil
	}
	if e, ok := m["doc"]; ok {
		f.Doc, _ = p.str(e, what+": doc")
	}
	if e, ok := m["deprecated"]; ok {
		f.Deprecated = p.deprecated(e)
	}
	if e, ok := m["optional"]; ok {
		f.Optional, _ = p.bool(e, what+": optional")
	}
	kind := f.Type.Kind
	isInt := kind == Int32 || kind == Int64
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if kind == Int32 {
		lo, hi = math.MinInt32, math.MaxInt32
	}
	for _, k := range []string{"min", "max"} {
		e, ok := m[k]
		if !ok {
			continue
		}
		if !isInt {
			p.errorf(pos(e.key), "%s: %s applies to int32 and int64 fields, not %s", what, k, f.Type)
			continue
		}
		v, ok := p.int(e, what+": "+k)
		if !ok {
			continue
		}
		if v < lo || v > hi {
			p.errorf(pos(e.val), "%s: %s %d is out of range for %s", what, k, v, f.Type)
			continue
		}
		if k == "min" {
			f.Min = &v
		} else {
			f.Max = &v
		}
	}
	if f.Min != nil && f.Max != nil && *f.Min > *f.Max {
		p.errorf(pos(m["max"].val), "%s: max %d is less than min %d", what, *f.Max, *f.Min)
	}
	if e, ok := m["max_length"]; ok {
		if kind != String {
			p.errorf(pos(e.key), "%s: max_length applies to string fields, not %s", what, f.Type)
		} else if v, ok := p.int(e, what+": max_length"); ok {
			if v < 1 || v > math.MaxInt32 {
				p.errorf(pos(e.val), "%s: max_length must be between 1 and %d", what, math.MaxInt32)
			} else {
				n := int(v)
				f.MaxLength = &n
			}
		}
	}
	if e, ok := m["pattern"]; ok {
		if kind != String {
			p.errorf(pos(e.key), "%s: pattern applies to string fields, not %s", what, f.Type)
		} else if s, ok := p.str(e, what+": pattern"); ok {
			if _, err := regexp.Compile(s); err != nil {
				p.errorf(pos(e.val), "%s: invalid pattern: %v", what, err)
			} else {
				f.Pattern = s
			}
		}
	}
	if e, ok := m["values"]; ok {
		inner := f.Type.Innermost()
		if inner.Kind != EnumKind {
			p.errorf(pos(e.key), "%s: values narrows an enum field, but the type is %s", what, f.Type)
		} else if vs, ok := p.stringList(e.val, what+": values"); ok {
			f.Values = []string{}
			for _, v := range vs {
				if !inner.Enum.Has(v.Name) {
					p.errorf(v.Pos, "%s: %q is not a value of enum %s%s", what, v.Name, inner.Enum.Name, didYouMean(v.Name, inner.Enum.Values))
					continue
				}
				f.Values = append(f.Values, v.Name)
			}
			if len(vs) == 0 {
				p.errorf(pos(e.val), "%s: values must list at least one value", what)
			}
		}
	}
	if e, ok := m["default"]; ok {
		if f.Optional {
			p.errorf(pos(e.key), "%s: a field is either optional or has a default, not both", what)
		} else {
			f.Default = p.defaultValue(f, e, what)
		}
	}
	return f
}

func (p *parser) typeExpr(s string, at Pos, what string) *Type {
	s = strings.TrimSpace(s)
	if k, ok := scalarNames[s]; ok {
		return &Type{Kind: k}
	}
	if e, ok := p.enums[s]; ok {
		return &Type{Kind: EnumKind, Enum: e}
	}
	if o, ok := p.objects[s]; ok {
		return &Type{Kind: ObjectKind, Object: o}
	}
	if inner, ok := strings.CutPrefix(s, "list<"); ok && strings.HasSuffix(inner, ">") {
		elem := p.typeExpr(strings.TrimSuffix(inner, ">"), at, what)
		if elem == nil {
			return nil
		}
		return &Type{Kind: List, Elem: elem}
	}
	if inner, ok := strings.CutPrefix(s, "map<"); ok && strings.HasSuffix(inner, ">") {
		key, val, ok := strings.Cut(strings.TrimSuffix(inner, ">"), ",")
		if !ok || strings.TrimSpace(key) != "string" {
			p.errorf(at, "%s: map type %q must be map<string,T>: JSON object keys are strings", what, s)
			return nil
		}
		elem := p.typeExpr(val, at, what)
		if elem == nil {
			return nil
		}
		return &Type{Kind: Map, Elem: elem}
	}
	var known []string
	for n := range scalarNames {
		known = append(known, n)
	}
	for n := range p.enums {
		known = append(known, n)
	}
	for n := range p.objects {
		known = append(known, n)
	}
	slices.Sort(known)
	p.errorf(at, "%s: unknown type %q%s (built-in types: bool, decimal, int32, int64, string, timestamp, uuid, list<T>, map<string,T>; or a name under enums: or types:)", what, s, didYouMean(s, known))
	return nil
}

func (p *parser) defaultValue(f *Field, e entry, what string) *Default {
	n := e.val
	d := &Default{Pos: pos(n)}
	bad := func(want string) *Default {
		p.errorf(pos(n), "%s: default must be %s, got %s", what, want, describe(n))
		return nil
	}
	switch f.Type.Kind {
	case Bool:
		if n.Tag != "!!bool" {
			return bad("true or false")
		}
		b, _ := p.bool(e, what+": default")
		d.Value = b
	case Int32, Int64:
		if n.Tag != "!!int" {
			return bad("an integer")
		}
		v, ok := p.int(e, what+": default")
		if !ok {
			return nil
		}
		if f.Type.Kind == Int32 && (v < math.MinInt32 || v > math.MaxInt32) {
			p.errorf(pos(n), "%s: default %d is out of range for int32", what, v)
			return nil
		}
		if f.Min != nil && v < *f.Min || f.Max != nil && v > *f.Max {
			p.errorf(pos(n), "%s: default %d violates the field's min/max", what, v)
			return nil
		}
		d.Value = v
	case String, Decimal, UUID, Timestamp, EnumKind:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			return bad("a string (quote it)")
		}
		s := n.Value
		switch f.Type.Kind {
		case Decimal:
			if !DecimalRE.MatchString(s) {
				p.errorf(pos(n), "%s: default %q is not a decimal string", what, s)
				return nil
			}
		case UUID:
			if _, err := uuid.Parse(s); err != nil {
				p.errorf(pos(n), "%s: default %q is not a UUID", what, s)
				return nil
			}
		case Timestamp:
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				p.errorf(pos(n), "%s: default %q is not an RFC 3339 timestamp", what, s)
				return nil
			}
		case EnumKind:
			if !slices.Contains(f.EnumValues(), s) {
				p.errorf(pos(n), "%s: default %q is not an accepted value of %s%s", what, s, f.Type.Enum.Name, didYouMean(s, f.EnumValues()))
				return nil
			}
		case String:
			if f.MaxLength != nil && len(s) > *f.MaxLength {
				p.errorf(pos(n), "%s: default is longer than max_length %d", what, *f.MaxLength)
				return nil
			}
			if f.Pattern != "" && !regexp.MustCompile(f.Pattern).MatchString(s) {
				p.errorf(pos(n), "%s: default %q does not match pattern %s", what, s, f.Pattern)
				return nil
			}
		}
		d.Value = s
	case List:
		if n.Kind != yaml.SequenceNode || len(n.Content) != 0 {
			return bad("[] (an empty list)")
		}
		d.Value = []any{}
	case Map:
		if n.Kind != yaml.MappingNode || len(n.Content) != 0 {
			return bad("{} (an empty map)")
		}
		d.Value = map[string]any{}
	case ObjectKind:
		p.errorf(pos(e.key), "%s: object fields cannot have a default; make the field optional", what)
		return nil
	}
	return d
}

// checkNames rejects Go identifier collisions between the names outboxgen
// generates for events, enums and object types.
func (p *parser) checkNames() {
	type decl struct {
		what string
		pos  Pos
	}
	names := map[string]decl{"Register": {what: "the generated Register function"}}
	add := func(name, what string, at Pos) {
		if prev, dup := names[name]; dup {
			where := ""
			if prev.pos.Line > 0 {
				where = fmt.Sprintf(" (line %d)", prev.pos.Line)
			}
			p.errorf(at, "%s: Go name %s is already used by %s%s", what, name, prev.what, where)
			return
		}
		names[name] = decl{what: what, pos: at}
	}
	for _, e := range p.file.Enums {
		add(e.Name, "enum "+e.Name, e.Pos)
		for _, v := range e.Values {
			add(e.Name+GoName(v), fmt.Sprintf("enum %s value %q", e.Name, v), e.Pos)
		}
	}
	for _, o := range p.file.Types {
		add(o.Name, "type "+o.Name, o.Pos)
	}
	for _, ev := range p.file.Events {
		what := "event " + ev.Name
		add(ev.Name, what, ev.Pos)
		for _, suffix := range []string{"Type", "LatestVersion"} {
			add(ev.Name+suffix, what, ev.Pos)
		}
		add("New"+ev.Name, what, ev.Pos)
		add("Decode"+ev.Name, what, ev.Pos)
		add("DecodeNewer"+ev.Name, what, ev.Pos)
		for _, v := range ev.Versions {
			add(fmt.Sprintf("%sV%d", ev.Name, v.Number), what, ev.Pos)
		}
	}
}

// checkCycles rejects object types that contain themselves through
// required object fields: a Go struct cannot contain itself. Optional
// fields (pointers), lists and maps break a cycle.
func (p *parser) checkCycles() {
	state := map[*Object]int{} // 1 visiting, 2 done
	var visit func(o *Object, path []string) bool
	visit = func(o *Object, path []string) bool {
		switch state[o] {
		case 1:
			p.errorf(o.Pos, "type %s contains itself through required fields (%s); make one of them optional, a list or a map", o.Name, strings.Join(append(path, o.Name), " → "))
			return true
		case 2:
			return false
		}
		state[o] = 1
		for _, f := range o.Fields {
			if f.Type.Kind == ObjectKind && !f.Optional && visit(f.Type.Object, append(path, o.Name+"."+f.Name)) {
				state[o] = 2
				return true
			}
		}
		state[o] = 2
		return false
	}
	for _, o := range p.file.Types {
		visit(o, nil)
	}
}
