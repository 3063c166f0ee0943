package codegen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// objectHasChecks reports whether values of o need validation, memoised;
// seen breaks cycles through optional or list fields.
func (b *builder) objectHasChecks(o *schema.Object, seen map[*schema.Object]bool) bool {
	if v, ok := b.objectChecks[o]; ok {
		return v
	}
	if seen == nil {
		seen = map[*schema.Object]bool{}
	}
	if seen[o] {
		return false
	}
	seen[o] = true
	has := false
	for _, f := range o.Fields {
		if b.hasChecks(f, f.Type, !f.Optional, seen) {
			has = true
		}
	}
	delete(seen, o)
	if len(seen) == 0 || has {
		b.objectChecks[o] = has
	}
	return has
}

func (b *builder) hasChecks(f *schema.Field, t *schema.Type, required bool, seen map[*schema.Object]bool) bool {
	switch t.Kind {
	case schema.String:
		return f.MaxLength != nil || f.Pattern != ""
	case schema.Int32, schema.Int64:
		return f.Min != nil || f.Max != nil
	case schema.Decimal, schema.EnumKind:
		return true
	case schema.UUID, schema.Timestamp:
		return required
	case schema.ObjectKind:
		return b.objectHasChecks(t.Object, seen)
	case schema.List, schema.Map:
		return b.hasChecks(f, t.Elem, false, seen)
	}
	return false
}

// jsonPath is the JSON path of a value while checks are built: a fmt
// format (literal parts escaped) and the Go expressions filling its verbs.
type jsonPath struct {
	format string
	args   []string
}

// field appends a field name: "name" at the top of Validate, ".name" inside
// a validate method or Entry, whose paths are relative suffixes.
func (p jsonPath) field(name string, top bool) jsonPath {
	sep := "."
	if top {
		sep = ""
	}
	return jsonPath{format: p.format + sep + strings.ReplaceAll(name, "%", "%%"), args: p.args}
}

func (p jsonPath) index(v string) jsonPath {
	return jsonPath{format: p.format + "[%d]", args: append(p.args[:len(p.args):len(p.args)], v)}
}

func (p jsonPath) key(v string) jsonPath {
	return jsonPath{format: p.format + "[%q]", args: append(p.args[:len(p.args):len(p.args)], v)}
}

// value is the Path of a failing value itself.
func (b *builder) value(p jsonPath) Path {
	if p.format == "" {
		return Path{Empty: true}
	}
	if len(p.args) > 0 {
		b.use("fmt")
		return Path{Format: strconv.Quote(p.format), Args: p.args}
	}
	return Path{Lit: strconv.Quote(strings.ReplaceAll(p.format, "%%", "%"))}
}

// prefix is the Path prepended to a nested validator's relative error path:
// the template adds err.Field as the last argument of Format, or after Lit.
func (b *builder) prefix(p jsonPath) Path {
	if p.format == "" {
		return Path{Empty: true}
	}
	if len(p.args) > 0 {
		b.use("fmt")
		return Path{Format: strconv.Quote(p.format + "%s"), Args: p.args}
	}
	return Path{Lit: strconv.Quote(strings.ReplaceAll(p.format, "%%", "%"))}
}

// checkScope names what checks are built for: the receiver expression
// prefix and the unexported functions' name prefix.
type checkScope struct {
	// owner is the Go type whose fields are checked (for Entry names).
	owner string
	// top: paths are absolute (Validate), else relative suffixes.
	top bool
	// entries collects the Entry functions map checks need.
	entries *[]Entry
}

// fieldChecks returns the checks of field f of a value held in recv ("e"
// or "o").
func (b *builder) fieldChecks(sc checkScope, recv string, f *schema.Field) []Check {
	x := recv + "." + schema.GoName(f.Name)
	path := jsonPath{}.field(f.Name, sc.top)
	c := fieldCtx{scope: sc, field: f, goField: schema.GoName(f.Name)}
	if f.Optional && pointerKind(f.Type) {
		inner := b.valueChecks(c, "*"+x, x, path, f.Type, false, 1)
		if len(inner) == 0 {
			return nil
		}
		if len(inner) == 1 && condition(inner[0].Kind) {
			inner[0].Guard = x
			return inner
		}
		return []Check{{Kind: "optional", X: x, Checks: inner}}
	}
	return b.valueChecks(c, x, x, path, f.Type, !f.Optional, 1)
}

// condition reports whether a check kind is a plain condition on a value.
func condition(kind string) bool {
	switch kind {
	case "maxLength", "pattern", "min", "max", "decimal", "uuidSet", "timeSet":
		return true
	}
	return false
}

type fieldCtx struct {
	scope   checkScope
	field   *schema.Field
	goField string
}

// loopVars returns the loop variables of a list or map at depth d: i and x
// at the top, i2 and x2 below, and so on.
func loopVars(index string, d int) (string, string) {
	if d == 1 {
		return index, "x"
	}
	return fmt.Sprintf("%s%d", index, d), fmt.Sprintf("x%d", d)
}

// valueChecks returns the checks of a value of type t held in x; ptr is
// the expression to call methods on (x without a dereference), required
// whether the value must be set.
func (b *builder) valueChecks(c fieldCtx, x, ptr string, path jsonPath, t *schema.Type, required bool, depth int) []Check {
	f := c.field
	var out []Check
	cond := func(kind, problem string, n int64) Check {
		return Check{Kind: kind, X: x, Path: b.value(path), Problem: strconv.Quote(problem), N: n}
	}
	switch t.Kind {
	case schema.String:
		if f.MaxLength != nil {
			b.use("unicode/utf8")
			out = append(out, cond("maxLength", fmt.Sprintf("must be at most %d characters long", *f.MaxLength), int64(*f.MaxLength)))
		}
		if f.Pattern != "" {
			ch := cond("pattern", "must match "+f.Pattern, 0)
			ch.Var = b.pattern(f.Pattern)
			out = append(out, ch)
		}
	case schema.Int32, schema.Int64:
		if f.Min != nil {
			out = append(out, cond("min", fmt.Sprintf("must be >= %d", *f.Min), int64(*f.Min)))
		}
		if f.Max != nil {
			out = append(out, cond("max", fmt.Sprintf("must be <= %d", *f.Max), int64(*f.Max)))
		}
	case schema.Decimal:
		b.use(genrtPkg)
		out = append(out, cond("decimal", `must be a decimal string such as "12.34"`, 0))
	case schema.UUID:
		if required {
			b.use(uuidPkg)
			out = append(out, cond("uuidSet", "must be set", 0))
		}
	case schema.Timestamp:
		if required {
			out = append(out, cond("timeSet", "must be set", 0))
		}
	case schema.EnumKind:
		ch := Check{Kind: "enum", X: x, Path: b.value(path)}
		for _, v := range f.EnumValues() {
			ch.Consts = append(ch.Consts, t.Enum.Name+schema.GoName(v))
		}
		b.use("fmt")
		ch.Problem = strconv.Quote("unknown value %q (want one of " + strings.ReplaceAll(strings.Join(f.EnumValues(), ", "), "%", "%%") + ")")
		out = append(out, ch)
	case schema.ObjectKind:
		if b.objectHasChecks(t.Object, nil) {
			out = append(out, Check{Kind: "object", X: ptr, Path: b.prefix(path)})
		}
	case schema.List:
		i, el := loopVars("i", depth)
		inner := b.valueChecks(c, el, el, path.index(i), t.Elem, false, depth+1)
		if len(inner) > 0 {
			out = append(out, Check{Kind: "list", X: x, Index: i, Elem: el, Checks: inner})
		}
	case schema.Map:
		if !b.hasChecks(f, t.Elem, false, nil) {
			break
		}
		k, el := loopVars("k", depth)
		b.use(genrtPkg)
		ch := Check{Kind: "map", X: x, Index: k, Path: b.prefix(path.key(k))}
		if t.Elem.Kind == schema.ObjectKind {
			ch.Func = t.Elem.Object.Name + ".validate"
		} else {
			ch.Func = b.entryName("validate" + c.scope.owner + c.goField + "Value")
			inner := b.valueChecks(c, el, el, jsonPath{}, t.Elem, false, depth+1)
			*c.scope.entries = append(*c.scope.entries, Entry{Func: ch.Func, Param: el, Type: b.goType(t.Elem, false), Checks: inner})
		}
		out = append(out, ch)
	}
	return out
}

// entryName returns name, or name with the smallest number suffix not yet
// taken by another Entry of the package.
func (b *builder) entryName(name string) string {
	n := name
	for i := 2; b.entryNames[n]; i++ {
		n = name + strconv.Itoa(i)
	}
	b.entryNames[n] = true
	return n
}

// pattern returns the variable holding the compiled pattern.
func (b *builder) pattern(p string) string {
	if v, ok := b.patterns[p]; ok {
		return v
	}
	v := fmt.Sprintf("outboxgenPattern%d", len(b.order)+1)
	b.patterns[p] = v
	b.order = append(b.order, p)
	return v
}
