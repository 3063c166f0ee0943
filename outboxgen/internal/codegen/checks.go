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

// fieldChecks returns the statements validating field f held in expr; path
// is a Go expression for the field's JSON path.
func (b *builder) fieldChecks(expr, path string, f *schema.Field) []string {
	if f.Optional && pointerKind(f.Type) {
		inner := b.valueChecks("*"+expr, path, f, f.Type, false, 1)
		if len(inner) == 0 {
			return nil
		}
		return []string{"if " + expr + " != nil {\n" + strings.Join(inner, "\n") + "\n}"}
	}
	return b.valueChecks(expr, path, f, f.Type, !f.Optional, 1)
}

func fieldError(path, problem string) string {
	return fmt.Sprintf("return &runtime.FieldError{Field: %s, Problem: %s}", path, problem)
}

// call wraps a dereference in parentheses before a method call.
func call(x string) string {
	if strings.HasPrefix(x, "*") {
		return "(" + x + ")"
	}
	return x
}

func (b *builder) valueChecks(x, path string, f *schema.Field, t *schema.Type, required bool, depth int) []string {
	var out []string
	add := func(cond, problem string) {
		out = append(out, fmt.Sprintf("if %s {\n%s\n}", cond, fieldError(path, problem)))
	}
	switch t.Kind {
	case schema.String:
		if f.MaxLength != nil {
			b.use("unicode/utf8")
			add(fmt.Sprintf("utf8.RuneCountInString(%s) > %d", x, *f.MaxLength), strconv.Quote(fmt.Sprintf("must be at most %d characters long", *f.MaxLength)))
		}
		if f.Pattern != "" {
			add(fmt.Sprintf("!%s.MatchString(%s)", b.pattern(f.Pattern), x), strconv.Quote("must match "+f.Pattern))
		}
	case schema.Int32, schema.Int64:
		if f.Min != nil {
			add(fmt.Sprintf("%s < %d", x, *f.Min), strconv.Quote(fmt.Sprintf("must be >= %d", *f.Min)))
		}
		if f.Max != nil {
			add(fmt.Sprintf("%s > %d", x, *f.Max), strconv.Quote(fmt.Sprintf("must be <= %d", *f.Max)))
		}
	case schema.Decimal:
		add(fmt.Sprintf("!runtime.IsDecimal(%s)", x), strconv.Quote("must be a decimal string such as \"12.34\""))
	case schema.UUID:
		if required {
			b.use(uuidPkg)
			add(fmt.Sprintf("%s == uuid.Nil", x), strconv.Quote("must be set"))
		}
	case schema.Timestamp:
		if required {
			add(call(x)+".IsZero()", strconv.Quote("must be set"))
		}
	case schema.EnumKind:
		var consts []string
		for _, v := range f.EnumValues() {
			consts = append(consts, t.Enum.Name+schema.GoName(v))
		}
		b.use("fmt")
		out = append(out, fmt.Sprintf("switch %s {\ncase %s:\ndefault:\n%s\n}", x, strings.Join(consts, ", "),
			fieldError(path, fmt.Sprintf("fmt.Sprintf(\"unknown value %%q (want one of %s)\", %s)", strings.Join(f.EnumValues(), ", "), x))))
	case schema.ObjectKind:
		if b.objectHasChecks(t.Object, nil) {
			out = append(out, fmt.Sprintf("if err := %s.validate(%s); err != nil {\nreturn err\n}", call(x), path))
		}
	case schema.List:
		i, el := fmt.Sprintf("i%d", depth), fmt.Sprintf("x%d", depth)
		inner := b.valueChecks(el, fmt.Sprintf(`fmt.Sprintf("%%s[%%d]", %s, %s)`, path, i), f, t.Elem, false, depth+1)
		if len(inner) > 0 {
			b.use("fmt")
			out = append(out, fmt.Sprintf("for %s, %s := range %s {\n%s\n}", i, el, x, strings.Join(inner, "\n")))
		}
	case schema.Map:
		// Map order is random: check every entry and report the error of
		// the smallest key, so the result is deterministic without
		// sorting (which would allocate on every Validate).
		k, el, fe, fk := fmt.Sprintf("k%d", depth), fmt.Sprintf("x%d", depth), fmt.Sprintf("err%d", depth), fmt.Sprintf("errKey%d", depth)
		inner := b.valueChecks(el, fmt.Sprintf(`fmt.Sprintf("%%s[%%q]", %s, %s)`, path, k), f, t.Elem, false, depth+1)
		if len(inner) > 0 {
			b.use("fmt")
			out = append(out, fmt.Sprintf("{\nvar %s error\nvar %s string\nfor %s, %s := range %s {\nerr := func() error {\n%s\nreturn nil\n}()\nif err != nil && (%s == nil || %s < %s) {\n%s, %s = err, %s\n}\n}\nif %s != nil {\nreturn %s\n}\n}",
				fe, fk, k, el, x, strings.Join(inner, "\n"), fe, k, fk, fe, fk, k, fe, fe))
		}
	}
	return out
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
