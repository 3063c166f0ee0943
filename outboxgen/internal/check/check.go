// Package check decides whether the versions of each event in a schema are
// compatible with each other under the event's compatibility mode, and
// whether released versions are unchanged (the lock file).
//
// Compatibility is Avro-style reader/writer resolution over the closed type
// set of outbox schemas: a reader decodes a writer's payload when every
// field it requires is written (or has a default), shared fields have the
// same type or an allowed widening, and every enum value the writer may
// write is one the reader accepts. Backward mode checks that each new
// version reads the versions before it, forward mode that they read it,
// full both; transitive modes check every earlier version of the
// compatibility line, the others only the previous one. A version marked
// breaking: true starts a new line.
//
// Every diagnostic names a rule:
//
//	VERSION_CONTIGUOUS        versions are 1..N without gaps
//	VERSION_FROZEN            a released version (in the lock file) is unchanged
//	TYPE_NAME_STABLE          an event keeps its released wire type
//	DRAFT_IN_RELEASE          no draft versions in a release (-release)
//	FIELD_REMOVED_UNRESERVED  a dropped field is listed under removed:
//	FIELD_NAME_REUSED         a removed field name never comes back
//	FIELD_REQUIRED_MISSING    a reader's required field is written by the writer
//	FIELD_SAME_TYPE           a shared field keeps its type (or widens)
//	FIELD_OPTIONALITY         a reader does not require what the writer may omit
//	ENUM_VALUE                the writer writes only enum values the reader accepts
//	UPCASTER_REQUIRED         a non-breaking version can be upcast from the previous
//	                          one by generated code
package check

import (
	"fmt"
	"slices"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// Rule names.
const (
	VersionContiguous      = "VERSION_CONTIGUOUS"
	VersionFrozen          = "VERSION_FROZEN"
	TypeNameStable         = "TYPE_NAME_STABLE"
	DraftInRelease         = "DRAFT_IN_RELEASE"
	FieldRemovedUnreserved = "FIELD_REMOVED_UNRESERVED"
	FieldNameReused        = "FIELD_NAME_REUSED"
	FieldRequiredMissing   = "FIELD_REQUIRED_MISSING"
	FieldSameType          = "FIELD_SAME_TYPE"
	FieldOptionality       = "FIELD_OPTIONALITY"
	EnumValue              = "ENUM_VALUE"
	UpcasterRequired       = "UPCASTER_REQUIRED"
)

// Options configure a check.
type Options struct {
	// Release rejects versions still marked draft.
	Release bool
	// LockPath names the lock file in messages.
	LockPath string
}

type checker struct {
	file *schema.File
	errs schema.ErrorList
}

func (c *checker) report(at schema.Pos, ev *schema.Event, v *schema.Version, rule, dir, format string, args ...any) {
	head := ev.Name
	if v != nil {
		head = fmt.Sprintf("%s v%d", ev.Name, v.Number)
	}
	if dir != "" {
		rule += " (" + dir + ")"
	}
	c.errs = append(c.errs, schema.Error{Path: c.file.Path, Pos: at, Msg: fmt.Sprintf("%s: %s: %s", head, rule, fmt.Sprintf(format, args...))})
}

// Check runs every rule on f. lock may be nil (nothing released yet).
func Check(f *schema.File, lock *Lock, opt Options) schema.ErrorList {
	c := &checker{file: f}
	for _, ev := range f.Events {
		c.event(ev, opt)
	}
	c.lock(lock, opt)
	return c.errs.Sort()
}

func (c *checker) event(ev *schema.Event, opt Options) {
	contiguous := true
	for i, v := range ev.Versions {
		if v.Number != i+1 {
			c.report(v.Pos, ev, v, VersionContiguous, "", "expected v%d; versions are numbered 1, 2, 3, ... without gaps", i+1)
			contiguous = false
			break
		}
		if v.Draft && opt.Release {
			c.report(v.Pos, ev, v, DraftInRelease, "", "version is still draft: true; remove the draft flag to release it")
		}
	}
	c.names(ev)
	if !contiguous {
		return
	}
	mode := ev.Compatibility
	lineStart := 0
	for i, v := range ev.Versions {
		if v.Breaking {
			lineStart = i
			continue
		}
		if i == 0 {
			continue
		}
		prev := ev.Versions[i-1]
		if !mode.Backward() {
			// The generated decoder upcasts every version, so a step
			// that is not marked breaking must be backward readable
			// whatever the mode.
			for _, is := range readable(v, prev) {
				c.report(is.pos(v), ev, v, UpcasterRequired, "", "v%d cannot be upcast from v%d by generated code: %s; mark v%d breaking: true and write upcast%sV%dToV%d", v.Number, prev.Number, is.msg, v.Number, ev.Name, prev.Number, v.Number)
			}
		}
		if mode == schema.ModeNone {
			continue
		}
		olds := []*schema.Version{prev}
		if mode.Transitive() {
			olds = ev.Versions[lineStart:i]
		}
		for _, old := range olds {
			if mode.Backward() {
				for _, is := range readable(v, old) {
					hint := is.hint
					c.report(is.pos(v), ev, v, is.rule, "backward", "%s%s", is.msg, hint)
				}
			}
			if mode.Forward() {
				for _, is := range readable(old, v) {
					c.report(is.pos(v), ev, v, is.rule, "forward", "%s%s", is.msg, is.hint)
				}
			}
		}
	}
}

// names checks tombstones: a field that disappears must be listed under
// removed:, and a removed (or vanished) name never comes back.
func (c *checker) names(ev *schema.Event) {
	tombstones := map[string]int{} // name → version that removed it
	gone := map[string]int{}       // name → first version without it
	for i, v := range ev.Versions {
		for _, r := range v.Removed {
			if _, ok := tombstones[r.Name]; !ok {
				tombstones[r.Name] = v.Number
			}
		}
		for _, f := range v.Fields {
			if rv, ok := tombstones[f.Name]; ok {
				c.report(f.Pos, ev, v, FieldNameReused, "", "%q was removed in v%d and may not be used again (old payloads carry it with another meaning); choose a new name", f.Name, rv)
			} else if gv, ok := gone[f.Name]; ok {
				c.report(f.Pos, ev, v, FieldNameReused, "", "%q was dropped in v%d and may not come back; choose a new name", f.Name, gv)
			}
		}
		if i == 0 {
			continue
		}
		for _, f := range ev.Versions[i-1].Fields {
			if v.Field(f.Name) != nil {
				continue
			}
			if _, ok := gone[f.Name]; !ok {
				gone[f.Name] = v.Number
			}
			if _, ok := tombstones[f.Name]; !ok {
				c.report(v.Pos, ev, v, FieldRemovedUnreserved, "", "%q dropped without listing it under removed:", f.Name)
			}
		}
	}
}

// issue is one reason a reader cannot read a writer's payload.
type issue struct {
	rule, msg, hint string
	// field is the field to point at, in whichever version holds it.
	field *schema.Field
}

// pos points at the field when the newer version holds it, else at the
// newer version.
func (is issue) pos(newer *schema.Version) schema.Pos {
	if is.field != nil && slices.Contains(newer.Fields, is.field) {
		return is.field.Pos
	}
	return newer.Pos
}

// readable lists why reader cannot decode payloads written as writer.
func readable(reader, writer *schema.Version) []issue {
	var out []issue
	rv, wv := fmt.Sprintf("v%d", reader.Number), fmt.Sprintf("v%d", writer.Number)
	for _, rf := range reader.Fields {
		wf := writer.Field(rf.Name)
		required := !rf.Optional && rf.Default == nil
		if wf == nil {
			if required {
				out = append(out, issue{rule: FieldRequiredMissing, field: rf,
					msg:  fmt.Sprintf("%s requires %q but %s does not write it", rv, rf.Name, wv),
					hint: "; make it optional or give it a default"})
			}
			continue
		}
		if !typeReadable(rf.Type, wf.Type) {
			out = append(out, issue{rule: FieldSameType, field: rf,
				msg:  fmt.Sprintf("%q is %s in %s but %s in %s", rf.Name, wf.Type, wv, rf.Type, rv),
				hint: "; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name"})
			continue
		}
		if required && wf.Optional {
			out = append(out, issue{rule: FieldOptionality, field: rf,
				msg:  fmt.Sprintf("%s requires %q but %s may omit it", rv, rf.Name, wv),
				hint: "; keep it optional or give it a default"})
		}
		if rvals, wvals := rf.EnumValues(), wf.EnumValues(); rvals != nil && wvals != nil {
			for _, w := range wvals {
				if !slices.Contains(rvals, w) {
					out = append(out, issue{rule: EnumValue, field: rf,
						msg: fmt.Sprintf("%s may write %q=%q, which %s does not accept", wv, rf.Name, w, rv)})
				}
			}
		}
	}
	return out
}

// typeReadable reports whether a reader of type r decodes JSON written as
// type w: the same type, or a widening the generated upcasters perform.
func typeReadable(r, w *schema.Type) bool {
	if r.Equal(w) {
		return true
	}
	switch {
	case w.Kind == schema.Int32 && r.Kind == schema.Int64:
		return true
	case r.Kind == schema.String && (w.Kind == schema.EnumKind || w.Kind == schema.Decimal || w.Kind == schema.UUID):
		return true
	}
	return false
}
