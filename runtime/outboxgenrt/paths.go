package outboxgenrt

import (
	"slices"
	"strconv"
)

// ObjectShape describes a JSON object for [MissingPaths]: the keys it must
// have and the values below it that hold further objects. Generated code
// declares one per object type of a schema (a table, indexed by
// [Shape].Object) and one per event version (the root).
type ObjectShape struct {
	// Required are the keys that must be present with a non-null value.
	Required []string
	// Nested are the keys whose values hold objects to check in turn.
	Nested []NestedShape
}

// NestedShape is a key of an [ObjectShape] whose value holds objects.
type NestedShape struct {
	Key   string
	Value Shape
}

// Shape is a value holding objects: an object of the table, or lists and
// maps of them.
type Shape struct {
	// Containers are the lists ('l') and maps ('m') around the object,
	// outermost first: "" for an object, "l" for list<T>, "ml" for
	// map<string,list<T>>.
	Containers string
	// Object is the index of the object's ObjectShape in the table.
	Object int
}

// MissingPaths returns the JSON paths of the required keys missing from the
// object in payload, or null there, and from every object nested in it as
// the shapes describe, or nil when none is missing: json.Unmarshal would
// leave a zero value for either, which a decoder must not take for data.
// A top-level key is named as is ("email"), a nested one by its full path
// ("address.city", "lines[2].sku", `items["a"].code`), the notation of
// [runtime.FieldError]; a null object inside a list or map is itself missing
// ("lines[1]"). Missing keys of an object come first in the order of
// root.Required and objects[i].Required, nested ones follow in the order of
// the payload. Optional values are checked when present and not null.
//
// Like [MissingKeys], MissingPaths scans without decoding values, matches
// keys exactly, lets the last of duplicate keys win, and leaves values of the
// wrong JSON type to json.Unmarshal. It allocates only when payload has
// nested objects (a path buffer) or a key is missing. It returns an error
// when payload is not a JSON object or is malformed.
func MissingPaths(payload []byte, root *ObjectShape, objects []ObjectShape) ([]string, error) {
	w := walker{s: scanner{b: payload}, objects: objects}
	w.s.space()
	if w.s.pos >= len(w.s.b) || w.s.b[w.s.pos] != '{' {
		return nil, errNotObject
	}
	if !w.object(root) {
		return nil, w.s.syntaxError()
	}
	return w.missing, nil
}

// walker descends into the values the shapes name and skips the others.
type walker struct {
	s       scanner
	objects []ObjectShape
	path    []byte
	missing []string
}

// object walks the object at s.pos (which starts with '{'; anything else is
// skipped) and records the required keys it lacks.
func (w *walker) object(o *ObjectShape) bool {
	if w.s.pos >= len(w.s.b) || w.s.b[w.s.pos] != '{' {
		return w.s.value()
	}
	w.s.pos++
	var found uint64 // bit i: o.Required[i] present (first 64 keys)
	var foundMore []bool
	if len(o.Required) > 64 {
		foundMore = make([]bool, len(o.Required)-64)
	}
	mark := len(w.missing)
	w.s.space()
	if !w.s.consume('}') {
		for {
			w.s.space()
			key, ok := w.s.key()
			if !ok {
				return false
			}
			w.s.space()
			if !w.s.consume(':') {
				return false
			}
			w.s.space()
			present := !w.s.null()
			for i, k := range o.Required {
				if string(key) != k {
					continue
				}
				switch {
				case i >= 64:
					foundMore[i-64] = present
				case present:
					found |= 1 << i
				default:
					found &^= 1 << i
				}
			}
			var nested *Shape
			for i := range o.Nested {
				if string(key) == o.Nested[i].Key {
					nested = &o.Nested[i].Value
					break
				}
			}
			switch {
			case nested != nil && present:
				n := len(w.path)
				if n > 0 {
					w.path = append(w.path, '.')
				}
				w.path = append(w.path, key...)
				ok = w.value(nested, 0)
				w.path = w.path[:n]
			default:
				ok = w.s.value()
			}
			if !ok {
				return false
			}
			w.s.space()
			if w.s.consume(',') {
				continue
			}
			if w.s.consume('}') {
				break
			}
			return false
		}
	}
	var own []string
	for i, k := range o.Required {
		if i < 64 && found&(1<<i) == 0 || i >= 64 && !foundMore[i-64] {
			own = append(own, w.join(k))
		}
	}
	if own != nil {
		w.missing = slices.Insert(w.missing, mark, own...)
	}
	return true
}

// value walks the value at s.pos, a non-null value of shape sh below
// sh.Containers[:level].
func (w *walker) value(sh *Shape, level int) bool {
	if level == len(sh.Containers) {
		return w.object(&w.objects[sh.Object])
	}
	var open, end byte = '[', ']'
	if sh.Containers[level] == 'm' {
		open, end = '{', '}'
	}
	if !w.s.consume(open) {
		return w.s.value() // a type error, left to json.Unmarshal
	}
	w.s.space()
	if w.s.consume(end) {
		return true
	}
	for i := 0; ; i++ {
		w.s.space()
		n := len(w.path)
		if open == '{' {
			key, ok := w.s.key()
			if !ok {
				return false
			}
			w.s.space()
			if !w.s.consume(':') {
				return false
			}
			w.s.space()
			w.path = append(w.path, '[')
			w.path = strconv.AppendQuote(w.path, string(key))
			w.path = append(w.path, ']')
		} else {
			w.path = append(w.path, '[')
			w.path = strconv.AppendInt(w.path, int64(i), 10)
			w.path = append(w.path, ']')
		}
		var ok bool
		switch {
		case !w.s.null():
			ok = w.value(sh, level+1)
		case level+1 == len(sh.Containers):
			// A null object in a list or map decodes as a zero value.
			w.missing = append(w.missing, string(w.path))
			ok = w.s.value()
		default:
			ok = w.s.value() // a null list or map decodes as empty
		}
		w.path = w.path[:n]
		if !ok {
			return false
		}
		w.s.space()
		if w.s.consume(',') {
			continue
		}
		return w.s.consume(end)
	}
}

// join is the path of key k of the object at w.path.
func (w *walker) join(k string) string {
	if len(w.path) == 0 {
		return k
	}
	return string(w.path) + "." + k
}

// null reports whether the value at s.pos is the literal null.
func (s *scanner) null() bool {
	const lit = "null"
	if len(s.b)-s.pos < len(lit) || string(s.b[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	end := s.pos + len(lit)
	if end == len(s.b) {
		return true
	}
	switch s.b[end] {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
