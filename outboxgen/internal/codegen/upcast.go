package codegen

import (
	"fmt"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// upcast builds the generated upcaster from a compatible version: fields
// present in both are copied (widened where the types allow), fields new in
// to get their defaults, optional fields stay nil.
func (b *builder) upcast(ev *schema.Event, from, to *schema.Version) (Upcast, error) {
	u := Upcast{
		Func:     upcastName(ev, from, to),
		From:     fmt.Sprintf("%sV%d", ev.Name, from.Number),
		To:       fmt.Sprintf("%sV%d", ev.Name, to.Number),
		ToNumber: to.Number,
	}
	u.Doc = comment("", fmt.Sprintf("%s upcasts version %d to version %d: shared fields are copied, fields new in v%d get their defaults.", u.Func, from.Number, to.Number, to.Number))
	for _, rf := range to.Fields {
		g := schema.GoName(rf.Name)
		wf := from.Field(rf.Name)
		if wf == nil {
			switch {
			case rf.Optional:
			case rf.Default != nil:
				u.Assigns = append(u.Assigns, Assign{Field: g, Expr: b.defaultExpr(rf)})
			default:
				return u, fmt.Errorf("%s v%d: cannot generate %s: required field %q has no default in v%d", ev.Name, to.Number, u.Func, rf.Name, to.Number)
			}
			continue
		}
		src := "v." + schema.GoName(wf.Name)
		conv := func(x string) (string, bool) { return convert(x, wf.Type, rf.Type) }
		if _, ok := conv(src); !ok {
			return u, fmt.Errorf("%s v%d: cannot generate %s: field %q changes type from %s to %s", ev.Name, to.Number, u.Func, rf.Name, wf.Type, rf.Type)
		}
		ptr := pointerKind(rf.Type)
		switch {
		case !wf.Optional && !rf.Optional:
			e, _ := conv(src)
			u.Assigns = append(u.Assigns, Assign{Field: g, Expr: e})
		case !wf.Optional && rf.Optional:
			e, _ := conv(src)
			if !ptr {
				u.Assigns = append(u.Assigns, Assign{Field: g, Expr: e})
			} else if e == src {
				u.Assigns = append(u.Assigns, Assign{Field: g, Expr: "&" + src})
			} else {
				u.Post = append(u.Post, fmt.Sprintf("{\nx := %s\nout.%s = &x\n}", e, g))
			}
		case wf.Optional && !rf.Optional:
			if rf.Default == nil {
				return u, fmt.Errorf("%s v%d: cannot generate %s: field %q is optional in v%d but required without default in v%d", ev.Name, to.Number, u.Func, rf.Name, from.Number, to.Number)
			}
			u.Assigns = append(u.Assigns, Assign{Field: g, Expr: b.defaultExpr(rf)})
			if ptr {
				e, _ := conv("*" + src)
				u.Post = append(u.Post, fmt.Sprintf("if %s != nil {\nout.%s = %s\n}", src, g, e))
			} else {
				u.Post = append(u.Post, fmt.Sprintf("if %s != nil {\nout.%s = %s\n}", src, g, src))
			}
		default: // both optional
			e, _ := conv("*" + src)
			if !ptr || e == "*"+src {
				u.Assigns = append(u.Assigns, Assign{Field: g, Expr: src})
			} else {
				u.Post = append(u.Post, fmt.Sprintf("if %s != nil {\nx := %s\nout.%s = &x\n}", src, e, g))
			}
		}
	}
	return u, nil
}

// convert returns the Go expression turning x of type from into type to,
// for the conversions the compatibility check allows without breaking: the
// same type, int32 → int64, and enum, decimal or uuid → string.
func convert(x string, from, to *schema.Type) (string, bool) {
	if from.Equal(to) {
		return x, true
	}
	switch {
	case from.Kind == schema.Int32 && to.Kind == schema.Int64:
		return "int64(" + x + ")", true
	case from.Kind == schema.EnumKind && to.Kind == schema.String:
		return "string(" + x + ")", true
	case from.Kind == schema.Decimal && to.Kind == schema.String:
		return x, true
	case from.Kind == schema.UUID && to.Kind == schema.String:
		return call(x) + ".String()", true
	}
	return "", false
}
