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
		In:       fmt.Sprintf("v%d", from.Number),
		Out:      fmt.Sprintf("v%d", to.Number),
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
				u.Assigns = append(u.Assigns, Assign{Field: g, Value: b.defaultValue(rf)})
			default:
				return u, fmt.Errorf("%s v%d: cannot generate %s: required field %q has no default in v%d", ev.Name, to.Number, u.Func, rf.Name, to.Number)
			}
			continue
		}
		src := u.In + "." + schema.GoName(wf.Name)
		conv := func(x string) (Value, bool) { return convert(x, wf.Type, rf.Type) }
		if _, ok := conv(src); !ok {
			return u, fmt.Errorf("%s v%d: cannot generate %s: field %q changes type from %s to %s", ev.Name, to.Number, u.Func, rf.Name, wf.Type, rf.Type)
		}
		ptr := pointerKind(rf.Type)
		switch {
		case !wf.Optional && !rf.Optional:
			v, _ := conv(src)
			u.Assigns = append(u.Assigns, Assign{Field: g, Value: v})
		case !wf.Optional && rf.Optional:
			v, _ := conv(src)
			switch {
			case !ptr:
				u.Assigns = append(u.Assigns, Assign{Field: g, Value: v})
			case v.Kind == "":
				u.Assigns = append(u.Assigns, Assign{Field: g, Value: Value{Kind: "address", X: src}})
			default:
				u.Posts = append(u.Posts, Post{Field: g, Var: b.local(u, rf.Name), Value: v})
			}
		case wf.Optional && !rf.Optional:
			if rf.Default == nil {
				return u, fmt.Errorf("%s v%d: cannot generate %s: field %q is optional in v%d but required without default in v%d", ev.Name, to.Number, u.Func, rf.Name, from.Number, to.Number)
			}
			u.Assigns = append(u.Assigns, Assign{Field: g, Value: b.defaultValue(rf)})
			if ptr {
				v, _ := conv("*" + src)
				u.Posts = append(u.Posts, Post{Field: g, Check: src, Value: v})
			} else {
				u.Posts = append(u.Posts, Post{Field: g, Check: src, Value: Value{X: src}})
			}
		default: // both optional
			v, _ := conv("*" + src)
			if !ptr || v.Kind == "" {
				u.Assigns = append(u.Assigns, Assign{Field: g, Value: Value{X: src}})
			} else {
				u.Posts = append(u.Posts, Post{Field: g, Check: src, Var: "x", Value: v})
			}
		}
	}
	return u, nil
}

// local names the variable an unconditional converted pointer field points
// at: the field's name in lower camel case, unless it collides with the
// upcaster's parameter or result.
func (b *builder) local(u Upcast, field string) string {
	n := schema.LowerGoName(field)
	if n == u.In || n == u.Out {
		n += "Value"
	}
	return n
}

// convert returns the Value turning x of type from into type to, for the
// conversions the compatibility check allows without breaking: the same
// type, int32 → int64, and enum, decimal or uuid → string.
func convert(x string, from, to *schema.Type) (Value, bool) {
	if from.Equal(to) {
		return Value{X: x}, true
	}
	switch {
	case from.Kind == schema.Int32 && to.Kind == schema.Int64:
		return Value{Kind: "int64", X: x}, true
	case from.Kind == schema.EnumKind && to.Kind == schema.String:
		return Value{Kind: "string", X: x}, true
	case from.Kind == schema.Decimal && to.Kind == schema.String:
		return Value{X: x}, true
	case from.Kind == schema.UUID && to.Kind == schema.String:
		// A method call needs no dereference: uuid.UUID.String has a value
		// receiver.
		if len(x) > 0 && x[0] == '*' {
			x = x[1:]
		}
		return Value{Kind: "uuidString", X: x}, true
	}
	return Value{}, false
}
