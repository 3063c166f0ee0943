package check

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// Against compares f with old, the same schema as it was at rev (a git
// revision or a file name, used in messages), without the lock file: a lock
// file edited together with the schema does not hide a change to what was
// released at rev. It reports, in f:
//
//   - TYPE_NAME_STABLE: an event released at rev has another wire type;
//   - VERSION_FROZEN: an event or version released at rev (not draft: true
//     there) is gone, or a released version changed; a changed version also
//     gets the rule violations between its definition at rev and its
//     current one, in the directions of the event's mode, marked
//     "against <rev>".
//
// Versions that are new since rev are compared with the released ones by
// [Check], which compares every pair within f. Events, versions and types
// of f marked Incomplete (parse errors) are skipped, and so is all of f when
// f itself is marked Incomplete.
func Against(f, old *schema.File, rev string) schema.ErrorList {
	if f.Incomplete {
		return nil
	}
	c := &checker{file: f}
	for _, oev := range old.Events {
		released := false
		for _, v := range oev.Versions {
			released = released || !v.Draft
		}
		if !released || oev.Incomplete {
			continue
		}
		ev := c.eventByType(oev.Type)
		if ev == nil {
			if byName := c.eventByName(oev.Name); byName != nil {
				if !byName.Incomplete {
					c.report(byName.TypePos, byName, nil, TypeNameStable, "", "wire type changed from %q (released at %s) to %q; released events keep their type: revert it, or declare a new event", oev.Type, rev, byName.Type)
				}
				continue
			}
			c.errs = append(c.errs, schema.Error{Path: f.Path, Msg: fmt.Sprintf("%s: %s: event %q was released at %s and is no longer in the schema; keep it so old payloads still decode", oev.Name, VersionFrozen, oev.Type, rev)})
			continue
		}
		if ev.Incomplete {
			continue
		}
		for _, ov := range oev.Versions {
			if ov.Draft || ov.Incomplete {
				continue
			}
			var nv *schema.Version
			for _, x := range ev.Versions {
				if x.Number == ov.Number {
					nv = x
				}
			}
			switch {
			case nv == nil:
				c.report(ev.Pos, ev, nil, VersionFrozen, "", "version v%d was released at %s and is no longer in the schema; keep it so old payloads still decode", ov.Number, rev)
			case nv.Incomplete:
			case nv.Draft:
				c.report(nv.Pos, ev, nv, VersionFrozen, "", "version was released at %s and cannot be a draft again", rev)
			case Fingerprint(ev, nv) != Fingerprint(oev, ov):
				c.report(nv.Pos, ev, nv, VersionFrozen, "", "version was released at %s and has changed since (%s); revert the change and add a new version instead", rev, describeChange(ov, nv))
				oldLabel := fmt.Sprintf("v%d at %s", ov.Number, rev)
				c.pair(ev, nv, ov, fmt.Sprintf("v%d", nv.Number), oldLabel, ev.Compatibility, ", against "+rev)
				if nv.Breaking != ov.Breaking {
					c.report(nv.Pos, ev, nv, VersionFrozen, "", "breaking: %t at %s, %t now", ov.Breaking, rev, nv.Breaking)
				}
			}
		}
	}
	return c.errs.Sort()
}

// describeChange names what changed on the wire between a released
// version (ov) and its current definition (nv): fields added and removed,
// and for each field present in both, each property (type, optional,
// default, min, max, max_length, pattern, values) that differs, with its
// value then and now. It compares the same canonical form as
// [Fingerprint], so it names something whenever the fingerprints differ.
func describeChange(ov, nv *schema.Version) string {
	var out []string
	if ov.Breaking != nv.Breaking {
		out = append(out, fmt.Sprintf("breaking %t → %t", ov.Breaking, nv.Breaking))
	}
	oldFields := canonFields(ov.Fields, map[*schema.Object]bool{})
	newFields := canonFields(nv.Fields, map[*schema.Object]bool{})
	byName := func(fs []any) (map[string]map[string]any, []string) {
		m, names := map[string]map[string]any{}, []string{}
		for _, f := range fs {
			f := f.(map[string]any)
			name := f["name"].(string)
			m[name], names = f, append(names, name)
		}
		return m, names
	}
	olds, oldOrder := byName(oldFields)
	news, newOrder := byName(newFields)
	for _, name := range newOrder {
		if olds[name] == nil {
			out = append(out, fmt.Sprintf("%q added", name))
		}
	}
	for _, name := range oldOrder {
		if news[name] == nil {
			out = append(out, fmt.Sprintf("%q removed", name))
		}
	}
	for _, name := range newOrder {
		o, n := olds[name], news[name]
		if o == nil {
			continue
		}
		keys := slices.Sorted(maps.Keys(o))
		for k := range n {
			if _, ok := o[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			was, now := canonString(o[k]), canonString(n[k])
			if was == now {
				continue
			}
			if k == "type" && typeName(o[k]) == typeName(n[k]) {
				out = append(out, fmt.Sprintf("%q: fields of %s changed", name, typeName(n[k])))
				continue
			}
			if k == "type" {
				was, now = typeName(o[k]), typeName(n[k])
			}
			out = append(out, fmt.Sprintf("%q: %s %s → %s", name, strings.ReplaceAll(k, "_", " "), was, now))
		}
	}
	if len(out) == 0 {
		// Same fields, same properties: only their order differs.
		out = append(out, "fields reordered")
	}
	return strings.Join(out, "; ")
}

// canonString returns a canonical property value (see [canonFields]) as
// JSON, or "none" when the property is not set.
func canonString(v any) string {
	if v == nil {
		return "none"
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// typeName returns a canonical type (see [canonType]) as the schema writes
// it: the type's name, list<...> or map<...>, an object by its name.
func typeName(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case map[string]any:
		switch {
		case t["object"] != nil:
			return t["object"].(string)
		case t["list"] != nil:
			return "list<" + typeName(t["list"]) + ">"
		case t["map"] != nil:
			return "map<string," + typeName(t["map"]) + ">"
		}
	}
	return canonString(v)
}
