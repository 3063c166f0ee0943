package check

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// Lock holds the fingerprints of released event versions. Its file form
// is one line per version, sorted: "<GoName> <wire type> <version>
// sha256:<hex>".
type Lock struct {
	Entries []LockEntry
}

// LockEntry is one released version.
type LockEntry struct {
	Event       string
	Type        string
	Version     int
	Fingerprint string
}

const lockHeader = "# outboxgen lock: fingerprints of released event versions. Generated; do not edit.\n" +
	"# A released version must not change: add a new version instead (VERSION_FROZEN).\n"

// ParseLock reads a lock file; path is used in errors.
func ParseLock(path string, data []byte) (*Lock, error) {
	l := &Lock{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 || !strings.HasPrefix(f[3], "sha256:") {
			return nil, fmt.Errorf("%s:%d: malformed lock line %q", path, n, line)
		}
		v, err := strconv.Atoi(f[2])
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s:%d: bad version %q", path, n, f[2])
		}
		l.Entries = append(l.Entries, LockEntry{Event: f[0], Type: f[1], Version: v, Fingerprint: f[3]})
	}
	return l, nil
}

// Bytes renders the lock file.
func (l *Lock) Bytes() []byte {
	var b bytes.Buffer
	b.WriteString(lockHeader)
	for _, e := range l.sorted() {
		fmt.Fprintf(&b, "%s %s %d %s\n", e.Event, e.Type, e.Version, e.Fingerprint)
	}
	return b.Bytes()
}

func (l *Lock) sorted() []LockEntry {
	es := slices.Clone(l.Entries)
	slices.SortFunc(es, func(a, b LockEntry) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Version, b.Version))
	})
	return es
}

// Within returns the entries of l that other holds too, unchanged.
func (l *Lock) Within(other *Lock) *Lock {
	out := &Lock{}
	for _, e := range l.Entries {
		if o, ok := other.find(e.Type, e.Version); ok && o == e {
			out.Entries = append(out.Entries, e)
		}
	}
	return out
}

func (l *Lock) find(typ string, version int) (LockEntry, bool) {
	if l == nil {
		return LockEntry{}, false
	}
	for _, e := range l.Entries {
		if e.Type == typ && e.Version == version {
			return e, true
		}
	}
	return LockEntry{}, false
}

// Update returns the lock with every released (non-draft) version of f
// that old lacks added. Entries already present are kept as they are.
func Update(f *schema.File, old *Lock) *Lock {
	l := &Lock{}
	if old != nil {
		l.Entries = slices.Clone(old.Entries)
	}
	for _, ev := range f.Events {
		for _, v := range ev.Versions {
			if v.Draft {
				continue
			}
			if _, ok := l.find(ev.Type, v.Number); !ok {
				l.Entries = append(l.Entries, LockEntry{Event: ev.Name, Type: ev.Type, Version: v.Number, Fingerprint: Fingerprint(ev, v)})
			}
		}
	}
	l.Entries = l.sorted()
	return l
}

// lock checks released versions against the lock file.
func (c *checker) lock(l *Lock, opt Options) {
	if l == nil {
		return
	}
	lockPath := cmp.Or(opt.LockPath, "the lock file")
	for _, e := range l.Entries {
		ev := c.eventByType(e.Type)
		if ev == nil {
			if byName := c.eventByName(e.Event); byName != nil {
				if byName.Type != e.Type && !byName.Incomplete {
					c.report(byName.TypePos, byName, nil, TypeNameStable, "", "wire type changed from %q (released, %s) to %q; released events keep their type: revert it, or declare a new event", e.Type, lockPath, byName.Type)
				}
				continue
			}
			c.errs = append(c.errs, schema.Error{Path: c.file.Path, Msg: fmt.Sprintf("%s v%d: %s: released version (%s) is no longer in the schema; keep it so old payloads still decode", e.Event, e.Version, VersionFrozen, lockPath)})
			continue
		}
		if ev.Incomplete {
			continue // parse errors: its versions are not known
		}
		var v *schema.Version
		for _, x := range ev.Versions {
			if x.Number == e.Version {
				v = x
			}
		}
		if v == nil {
			c.report(ev.Pos, ev, nil, VersionFrozen, "", "released version v%d (%s) is no longer in the schema; keep it so old payloads still decode", e.Version, lockPath)
			continue
		}
		if v.Incomplete {
			continue // parse errors: its fingerprint is not known
		}
		if v.Draft {
			c.report(v.Pos, ev, v, VersionFrozen, "", "version was released (%s) and cannot be a draft again", lockPath)
			continue
		}
		if fp := Fingerprint(ev, v); fp != e.Fingerprint {
			c.report(v.Pos, ev, v, VersionFrozen, "", "released version changed (%s has %s, the schema now gives %s; -against <git revision> names the change); revert the change and add a new version instead (a lock line binds once it is committed: until then a version may change, and draft: true keeps it out of the lock)", lockPath, short(e.Fingerprint), short(fp))
		}
	}
}

func short(fp string) string {
	if len(fp) > len("sha256:")+12 {
		return fp[:len("sha256:")+12]
	}
	return fp
}

func (c *checker) eventByType(t string) *schema.Event {
	for _, ev := range c.file.Events {
		if ev.Type == t {
			return ev
		}
	}
	return nil
}

func (c *checker) eventByName(n string) *schema.Event {
	for _, ev := range c.file.Events {
		if ev.Name == n {
			return ev
		}
	}
	return nil
}

// Missing returns the released versions of f that l does not record yet:
// the lock file is stale.
func Missing(f *schema.File, l *Lock) []string {
	var out []string
	for _, ev := range f.Events {
		for _, v := range ev.Versions {
			if _, ok := l.find(ev.Type, v.Number); !ok && !v.Draft {
				out = append(out, fmt.Sprintf("%s v%d", ev.Type, v.Number))
			}
		}
	}
	return out
}

// Fingerprint returns the canonical fingerprint of an event version: what
// is on the wire (type, version, fields with types, optionality, defaults,
// constraints, accepted enum values) and not docs or deprecation notes.
func Fingerprint(ev *schema.Event, v *schema.Version) string {
	canon := map[string]any{
		"type":     ev.Type,
		"version":  v.Number,
		"breaking": v.Breaking,
		"fields":   canonFields(v.Fields, map[*schema.Object]bool{}),
	}
	// Plain maps, slices, strings, numbers and bools always marshal; map
	// keys come out sorted, which makes the form canonical.
	data, _ := json.Marshal(canon)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func canonFields(fs []*schema.Field, seen map[*schema.Object]bool) []any {
	out := make([]any, 0, len(fs))
	for _, f := range fs {
		m := map[string]any{"name": f.Name, "type": canonType(f.Type, seen), "optional": f.Optional}
		if f.Default != nil {
			m["default"] = f.Default.Value
		}
		if f.Min != nil {
			m["min"] = *f.Min
		}
		if f.Max != nil {
			m["max"] = *f.Max
		}
		if f.MaxLength != nil {
			m["max_length"] = *f.MaxLength
		}
		if f.Pattern != "" {
			m["pattern"] = f.Pattern
		}
		if vals := f.EnumValues(); vals != nil {
			m["values"] = vals
		}
		out = append(out, m)
	}
	return out
}

func canonType(t *schema.Type, seen map[*schema.Object]bool) any {
	switch t.Kind {
	case schema.ObjectKind:
		if seen[t.Object] {
			return map[string]any{"object": t.Object.Name}
		}
		seen[t.Object] = true
		defer delete(seen, t.Object)
		return map[string]any{"object": t.Object.Name, "fields": canonFields(t.Object.Fields, seen)}
	case schema.List:
		return map[string]any{"list": canonType(t.Elem, seen)}
	case schema.Map:
		return map[string]any{"map": canonType(t.Elem, seen)}
	}
	return t.String()
}
