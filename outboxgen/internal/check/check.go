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
//	FIELD_CONSTRAINT          the reader's constraints (min, max, max_length,
//	                          pattern) accept every value the writer's allow
//	UPCASTER_REQUIRED         a non-breaking version can be upcast from the previous
//	                          one by generated code
//
// [Check] compares the versions within one file (and with the lock file);
// [Against] compares the file with an older copy of itself, such as the
// schema on the main branch (outboxgen -against), without the lock file.
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
	FieldConstraint        = "FIELD_CONSTRAINT"
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
//
// Every pair of versions that can be compared is compared, whatever else is
// wrong: a version gap does not stop the comparison of the versions on
// either side of it, and f may be the partial file [schema.Parse] returns
// with its errors, in which case events, versions and types marked
// Incomplete are left out and everything else is still checked. A file
// marked Incomplete itself (its events could not be read at all, e.g. a
// YAML syntax error) is not checked: the parse errors are all there is to
// report.
func Check(f *schema.File, lock *Lock, opt Options) schema.ErrorList {
	if f.Incomplete {
		return nil
	}
	c := &checker{file: f}
	for _, ev := range f.Events {
		c.event(ev, opt)
	}
	c.lock(lock, opt)
	return c.errs.Sort()
}

func (c *checker) event(ev *schema.Event, opt Options) {
	if ev.Incomplete {
		return
	}
	want := 1
	for _, v := range ev.Versions {
		if v.Number != want {
			c.report(v.Pos, ev, v, VersionContiguous, "", "expected v%d; versions are numbered 1, 2, 3, ... without gaps", want)
		}
		want = v.Number + 1
		if v.Draft && opt.Release {
			c.report(v.Pos, ev, v, DraftInRelease, "", "version is still draft: true; remove the draft flag to release it")
		}
	}
	c.names(ev)
	mode := ev.Compatibility
	lineStart := 0
	for i, v := range ev.Versions {
		if v.Breaking {
			lineStart = i
			continue
		}
		if v.Incomplete {
			continue
		}
		// The versions v is compared with: the complete ones of its
		// compatibility line, the nearest last.
		var line []*schema.Version
		for _, o := range ev.Versions[lineStart:i] {
			if !o.Incomplete {
				line = append(line, o)
			}
		}
		if len(line) == 0 {
			continue
		}
		prev := line[len(line)-1]
		if !mode.Backward() {
			// The generated decoder upcasts every version, so a step
			// that is not marked breaking must be backward readable
			// whatever the mode.
			for _, is := range readable(v, prev, label(v), label(prev), true) {
				c.report(is.pos(v), ev, v, UpcasterRequired, "", "v%d cannot be upcast from v%d by generated code: %s; mark v%d breaking: true and write upcast%sV%dToV%d", v.Number, prev.Number, is.msg, v.Number, ev.Name, prev.Number, v.Number)
			}
		}
		if mode == schema.ModeNone {
			continue
		}
		olds := []*schema.Version{prev}
		if mode.Transitive() {
			olds = line
		}
		for _, old := range olds {
			c.pair(ev, v, old, label(v), label(old), mode, "")
		}
	}
}

// pair reports why newer and older (labelled so in messages) are not
// compatible under mode; suffix is appended to the direction.
func (c *checker) pair(ev *schema.Event, newer, older *schema.Version, newLabel, oldLabel string, mode schema.Mode, suffix string) {
	// Between two versions of the schema (not a version and its deployed
	// self), a field change the rules refuse is allowed by starting a new
	// compatibility line: say so.
	breaking := ""
	if newer.Number != older.Number {
		breaking = fmt.Sprintf(", or mark v%d breaking: true and write its upcaster", newer.Number)
	}
	if mode.Backward() {
		for _, is := range readable(newer, older, newLabel, oldLabel, true) {
			c.report(is.pos(newer), ev, newer, is.rule, "backward"+suffix, "%s%s%s", is.msg, is.hint, breakingHint(is, breaking))
		}
	}
	if mode.Forward() {
		for _, is := range readable(older, newer, oldLabel, newLabel, false) {
			c.report(is.pos(newer), ev, newer, is.rule, "forward"+suffix, "%s%s%s", is.msg, is.hint, breakingHint(is, breaking))
		}
	}
}

// breakingHint returns hint for the field rules that a breaking version
// lifts, and "" for the others.
func breakingHint(is issue, hint string) string {
	switch is.rule {
	case FieldRequiredMissing, FieldSameType, FieldOptionality:
		return hint
	}
	return ""
}

func label(v *schema.Version) string { return fmt.Sprintf("v%d", v.Number) }

// names checks tombstones: a field that disappears must be listed under
// removed:, and a removed (or vanished) name never comes back. Fields of
// incomplete versions are not compared (their tombstones still count).
func (c *checker) names(ev *schema.Event) {
	tombstones := map[string]int{} // name → version that removed it
	gone := map[string]int{}       // name → first version without it
	var prev *schema.Version
	for _, v := range ev.Versions {
		for _, r := range v.Removed {
			if _, ok := tombstones[r.Name]; !ok {
				tombstones[r.Name] = v.Number
			}
		}
		if v.Incomplete {
			continue
		}
		for _, f := range v.Fields {
			if rv, ok := tombstones[f.Name]; ok {
				c.report(f.Pos, ev, v, FieldNameReused, "", "%q was removed in v%d and may not be used again (old payloads carry it with another meaning); choose a new name", f.Name, rv)
			} else if gv, ok := gone[f.Name]; ok {
				c.report(f.Pos, ev, v, FieldNameReused, "", "%q was dropped in v%d and may not come back; choose a new name", f.Name, gv)
			}
		}
		if prev != nil {
			for _, f := range prev.Fields {
				if v.Field(f.Name) != nil {
					continue
				}
				if _, ok := gone[f.Name]; !ok {
					gone[f.Name] = v.Number
				}
				if _, ok := tombstones[f.Name]; !ok {
					c.report(v.Pos, ev, v, FieldRemovedUnreserved, "", "%q (a field of v%d) dropped without listing it under removed:", f.Name, prev.Number)
				}
			}
		}
		prev = v
	}
}

// issue is one reason a reader cannot read a writer's payload.
type issue struct {
	rule, msg, hint string
	// field is the field to point at, in whichever version holds it.
	field *schema.Field
}

// pos points at the field in the newer version: the one the issue is
// about, else the one of the same name; else at the newer version.
func (is issue) pos(newer *schema.Version) schema.Pos {
	if is.field != nil {
		if f := newer.Field(is.field.Name); f != nil {
			return f.Pos
		}
	}
	return newer.Pos
}

// readable lists why reader (labelled rv in messages) cannot decode
// payloads written as writer (wv). readerNewer tells which of the two is
// the newer version, for messages that say how a constraint changed.
func readable(reader, writer *schema.Version, rv, wv string, readerNewer bool) []issue {
	return readableFields(reader.Fields, writer.Fields, rv, wv, readerNewer, "", map[[2]*schema.Object]bool{})
}

// readableFields compares reader's fields with writer's; prefix qualifies
// field names inside objects ("amount."). seen stops the recursion through
// self-referencing object types.
func readableFields(reader, writer []*schema.Field, rv, wv string, readerNewer bool, prefix string, seen map[[2]*schema.Object]bool) []issue {
	var out []issue
	for _, rf := range reader {
		wf := fieldIn(writer, rf.Name)
		name := prefix + rf.Name
		required := !rf.Optional && rf.Default == nil
		if wf == nil {
			if required {
				out = append(out, issue{rule: FieldRequiredMissing, field: rf,
					msg:  fmt.Sprintf("%s requires %q but %s does not write it", rv, name, wv),
					hint: "; make it optional or give it a default"})
			}
			continue
		}
		if !typeReadable(rf.Type, wf.Type) {
			out = append(out, issue{rule: FieldSameType, field: rf,
				msg:  fmt.Sprintf("%q is %s in %s but %s in %s", name, wf.Type, wv, rf.Type, rv),
				hint: "; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name"})
			continue
		}
		if required && wf.Optional {
			out = append(out, issue{rule: FieldOptionality, field: rf,
				msg:  fmt.Sprintf("%s requires %q but %s may omit it", rv, name, wv),
				hint: "; keep it optional or give it a default"})
		}
		if rvals, wvals := rf.EnumValues(), wf.EnumValues(); rvals != nil && wvals != nil {
			for _, w := range wvals {
				if !slices.Contains(rvals, w) {
					out = append(out, issue{rule: EnumValue, field: rf,
						msg: fmt.Sprintf("%s may write %q=%q, which %s does not accept", wv, name, w, rv)})
				}
			}
		}
		out = append(out, constraintIssues(rf, wf, rv, wv, readerNewer, name)...)
		// Object types of two different files (-against) are compared
		// field by field; within one file a type is the same everywhere.
		ro, wo := rf.Type.Innermost().Object, wf.Type.Innermost().Object
		if ro != nil && wo != nil && ro != wo && !seen[[2]*schema.Object{ro, wo}] {
			seen[[2]*schema.Object{ro, wo}] = true
			for _, is := range readableFields(ro.Fields, wo.Fields, rv, wv, readerNewer, name+".", seen) {
				is.field = rf
				out = append(out, is)
			}
		}
	}
	return out
}

func fieldIn(fs []*schema.Field, name string) *schema.Field {
	for _, f := range fs {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// typeReadable reports whether a reader of type r decodes JSON written as
// type w: the same type, or a widening the generated upcasters perform.
func typeReadable(r, w *schema.Type) bool {
	if sameType(r, w) {
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

// sameType is [schema.Type.Equal] for types that may come from two files
// (-against): enums and object types are the same when their names are;
// their values and fields are compared by readableFields.
func sameType(r, w *schema.Type) bool {
	if r.Kind != w.Kind {
		return false
	}
	switch r.Kind {
	case schema.EnumKind:
		return r.Enum.Name == w.Enum.Name
	case schema.ObjectKind:
		return r.Object.Name == w.Object.Name
	case schema.List, schema.Map:
		return sameType(r.Elem, w.Elem)
	}
	return true
}
