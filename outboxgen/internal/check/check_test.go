package check

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

func parse(t *testing.T, src string) *schema.File {
	t.Helper()
	f, err := schema.Parse("events.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const base = `outboxgen: 1
events:
  A:
    type: a.a
    aggregate: A
    doc: %DOC%
    versions:
      1:
        fields:
          x: {type: int32, min: 1, doc: %DOC%}
`

func TestFingerprintIgnoresDocs(t *testing.T) {
	f1 := parse(t, strings.ReplaceAll(base, "%DOC%", "one"))
	f2 := parse(t, strings.ReplaceAll(base, "%DOC%", "two"))
	fp := func(f *schema.File) string { return Fingerprint(f.Events[0], f.Events[0].Versions[0]) }
	if fp(f1) != fp(f2) {
		t.Error("fingerprint depends on docs")
	}
	f3 := parse(t, strings.ReplaceAll(strings.Replace(base, "min: 1", "min: 2", 1), "%DOC%", "one"))
	if fp(f1) == fp(f3) {
		t.Error("fingerprint ignores a constraint change")
	}
}

func TestLockRoundTrip(t *testing.T) {
	f := parse(t, strings.ReplaceAll(base, "%DOC%", "d"))
	l := Update(f, nil)
	back, err := ParseLock("events.lock", l.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(l, back); diff != "" {
		t.Errorf("lock round trip (-want +got):\n%s", diff)
	}
	if errs := Check(f, back, Options{}); len(errs) != 0 {
		t.Errorf("Check with its own lock: %v", errs)
	}
	if m := Missing(f, back); len(m) != 0 {
		t.Errorf("Missing = %v", m)
	}
	if _, err := ParseLock("events.lock", []byte("A a.a x sha256:1\n")); err == nil {
		t.Error("ParseLock accepted a bad version")
	}
}

func TestModesAgainstPairs(t *testing.T) {
	// v2 adds a required field without default: backward breaks, forward
	// does not (old readers ignore it).
	src := `outboxgen: 1
compatibility: %MODE%
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
          x: int32
      2:
        fields:
          x: int32
          y: string
`
	for mode, want := range map[string][]string{
		"backward":        {"FIELD_REQUIRED_MISSING (backward)"},
		"full_transitive": {"FIELD_REQUIRED_MISSING (backward)"},
		"forward":         {"UPCASTER_REQUIRED"},
		"none":            {"UPCASTER_REQUIRED"},
	} {
		errs := Check(parse(t, strings.Replace(src, "%MODE%", mode, 1)), nil, Options{})
		var got []string
		for _, e := range errs {
			for _, r := range []string{"FIELD_REQUIRED_MISSING (backward)", "UPCASTER_REQUIRED"} {
				if strings.Contains(e.Msg, r) {
					got = append(got, r)
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("mode %s (-want +got):\n%s\nerrors: %v", mode, diff, errs)
		}
	}
}

// TestIncompleteVersionSkipped: a version with a parse error is left out of
// the comparisons, and its neighbours are compared with each other.
func TestIncompleteVersionSkipped(t *testing.T) {
	src := `outboxgen: 1
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
          x: int32
      2:
        fields:
          x: Nope
      3:
        fields:
          x: string
      5:
        fields:
          x: string
`
	f, err := schema.Parse("events.yaml", []byte(src))
	if err == nil || f == nil {
		t.Fatalf("Parse = %v, %v; want the partial file and an error", f, err)
	}
	if v := f.Events[0].Versions; len(v) != 4 || !v[1].Incomplete || v[0].Incomplete || v[2].Incomplete {
		t.Fatalf("versions %+v", v)
	}
	var got []string
	for _, e := range Check(f, nil, Options{}) {
		got = append(got, e.Error())
	}
	want := []string{
		`events.yaml:15:11: A v3: FIELD_SAME_TYPE (backward): "x" is int32 in v1 but string in v3; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v3 breaking: true and write its upcaster`,
		`events.yaml:15:11: A v3: FIELD_SAME_TYPE (forward): "x" is string in v3 but int32 in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v3 breaking: true and write its upcaster`,
		`events.yaml:16:7: A v5: VERSION_CONTIGUOUS: expected v4; versions are numbered 1, 2, 3, ... without gaps`,
		`events.yaml:18:11: A v5: FIELD_SAME_TYPE (backward): "x" is int32 in v1 but string in v5; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v5 breaking: true and write its upcaster`,
		`events.yaml:18:11: A v5: FIELD_SAME_TYPE (forward): "x" is string in v5 but int32 in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v5 breaking: true and write its upcaster`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestLockSkipsIncomplete: a released version with a parse error is not
// reported as changed (its fingerprint is unknown), while a released
// version that did change in the same file still is.
func TestLockSkipsIncomplete(t *testing.T) {
	src := `outboxgen: 1
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
          x: int32
  B:
    type: b.b
    aggregate: B
    versions:
      1:
        fields:
          y: int32
`
	lock := Update(parse(t, src), nil)
	edited := strings.Replace(strings.Replace(src, "x: int32", "x: Nope", 1), "y: int32", "y: int64", 1)
	f, err := schema.Parse("events.yaml", []byte(edited))
	if err == nil {
		t.Fatal("Parse accepted an unknown type")
	}
	var got []string
	for _, e := range Check(f, lock, Options{LockPath: "events.lock"}) {
		got = append(got, e.Error())
	}
	want := []string{"events.yaml:14:7: B v1: VERSION_FROZEN: released version changed (events.lock has sha256:" + strings.TrimPrefix(lock.Entries[1].Fingerprint, "sha256:")[:12] + ", the schema now gives " + short(Fingerprint(f.Events[1], f.Events[1].Versions[0])) + "; -against <git revision> names the change); revert the change and add a new version instead (a lock line binds once it is committed: until then a version may change, and draft: true keeps it out of the lock)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzCheck runs the checker on whatever Parse returns, the partial files
// of broken schemas included, and compares each file with the first seed
// as -against does: neither may panic, and every diagnostic has a path.
func FuzzCheck(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/*/events.yaml")
	var first *schema.File
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		if first == nil {
			first, _ = schema.Parse("old.yaml", data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, _ := schema.Parse("f.yaml", data)
		if file == nil {
			t.Fatal("Parse returned no file")
		}
		errs := append(Check(file, Update(file, nil), Options{Release: true}), Against(file, first, "HEAD")...)
		if first != nil {
			errs = append(errs, Against(first, file, "HEAD")...)
		}
		for _, e := range errs {
			if e.Path == "" || e.Msg == "" {
				t.Fatalf("diagnostic without path or message: %+v", e)
			}
		}
	})
}

// TestFieldConstraint: a constraint the generated Validate enforces that
// gets tighter in a new version breaks backward compatibility (the new
// reader rejects old payloads; without backward mode the generated
// upcaster cannot be used), one that gets looser breaks forward
// compatibility (old readers reject new payloads). Each kind is checked
// both ways, in every mode, with the version marked breaking as the
// opt-out.
func TestFieldConstraint(t *testing.T) {
	src := `outboxgen: 1
compatibility: %MODE%
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
          f: %OLD%
      2:
        %BREAKING%fields:
          f: %NEW%
`
	type change struct{ name, loose, tight, msg string }
	changes := []change{
		{"max_length", "string", "{type: string, max_length: 5}", `max_length of "f" %s from %s in %s to %s in %s`},
		{"max_length smaller", "{type: string, max_length: 6}", "{type: string, max_length: 5}", `max_length of "f" %s from %s in %s to %s in %s`},
		{"min", "int64", "{type: int64, min: 1}", `min of "f" %s from %s in %s to %s in %s`},
		{"min larger", "{type: int32, min: -3}", "{type: int32, min: 0}", `min of "f" %s from %s in %s to %s in %s`},
		{"max", "int64", "{type: int64, max: 9}", `max of "f" %s from %s in %s to %s in %s`},
		{"max smaller", "{type: int64, max: 10}", "{type: int64, max: 9}", `max of "f" %s from %s in %s to %s in %s`},
		{"pattern", "string", `{type: string, pattern: "^a"}`, `pattern of "f" changed from %[2]s in %[3]s to %[4]s in %[5]s`},
	}
	values := map[string][2]string{ // loose, tight as printed
		"max_length": {"none", "5"}, "max_length smaller": {"6", "5"},
		"min": {"none", "1"}, "min larger": {"-3", "0"},
		"max": {"none", "9"}, "max smaller": {"10", "9"},
		"pattern": {"none", `"^a"`},
	}
	for _, c := range changes {
		for _, tighten := range []bool{true, false} {
			old, new := c.loose, c.tight
			verb, oldV, newV := "tightened", values[c.name][0], values[c.name][1]
			if !tighten {
				old, new = new, old
				verb, oldV, newV = "loosened", newV, oldV
			}
			if c.name == "pattern" && tighten {
				verb = "changed"
			}
			change := fmt.Sprintf(c.msg, verb, oldV, "v1", newV, "v2")
			backward := fmt.Sprintf("A v2: FIELD_CONSTRAINT (backward): %s: v2 rejects values v1 may write", change)
			forward := fmt.Sprintf("A v2: FIELD_CONSTRAINT (forward): %s: v1 rejects values v2 may write", change)
			upcast := fmt.Sprintf("A v2: UPCASTER_REQUIRED: v2 cannot be upcast from v1 by generated code: %s: v2 rejects values v1 may write", change)
			for _, mode := range []string{"none", "backward", "backward_transitive", "forward", "forward_transitive", "full", "full_transitive"} {
				for _, breaking := range []bool{false, true} {
					s := strings.NewReplacer("%MODE%", mode, "%OLD%", old, "%NEW%", new).Replace(src)
					s = strings.Replace(s, "%BREAKING%", map[bool]string{true: "breaking: true\n        ", false: ""}[breaking], 1)
					var want []string
					m := schema.Mode(mode)
					switch {
					case breaking:
					case tighten && m.Backward():
						want = append(want, backward)
					case tighten:
						want = append(want, upcast)
					case m.Forward():
						want = append(want, forward)
					}
					var got []string
					for _, e := range Check(parse(t, s), nil, Options{}) {
						got = append(got, strings.SplitN(e.Msg, ";", 2)[0])
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("%s %s, tighten=%t, breaking=%t (-want +got):\n%s", c.name, mode, tighten, breaking, diff)
					}
				}
			}
		}
	}
}

// TestFieldConstraintTypeBounds: an int32 is bounded by its type, so
// widening it to an int64 with the int32 limits as min and max, or an
// unchanged constraint, is no constraint change; an int64 min at the
// int64 limit is no constraint at all.
func TestFieldConstraintTypeBounds(t *testing.T) {
	src := `outboxgen: 1
compatibility: backward_transitive
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
          a: int32
          b: {type: int64, min: 1, max: 5}
          c: {type: string, max_length: 3, pattern: "^x"}
          d: int64
      2:
        fields:
          a: {type: int64, min: -2147483648, max: 2147483647}
          b: {type: int64, min: 1, max: 5}
          c: {type: string, max_length: 3, pattern: "^x"}
          d: {type: int64, min: -9223372036854775808}
      3:
        fields:
          a: {type: int64, min: -2147483648, max: 2147483646}
          b: {type: int64, min: 1, max: 5}
          c: {type: string, max_length: 3, pattern: "^x"}
          d: int64
`
	var got []string
	for _, e := range Check(parse(t, src), nil, Options{}) {
		got = append(got, strings.SplitN(e.Msg, ";", 2)[0])
	}
	want := []string{
		// v3 against v1 and v2, whose bound is 2147483647 (v1's by its
		// type, v2's written).
		`A v3: FIELD_CONSTRAINT (backward): max of "a" tightened from 2147483647 in v2 to 2147483646 in v3: v3 rejects values v2 may write`,
		`A v3: FIELD_CONSTRAINT (backward): max of "a" tightened from none in v1 to 2147483646 in v3: v3 rejects values v1 may write`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestLockSkipsUnreadFile: a schema whose events could not be read (a YAML
// syntax error, a top level or events: that is not a mapping) or an event
// whose body is not a mapping is not compared with the lock file: its
// released versions are not "no longer in the schema". Against skips the
// unread file too.
func TestLockSkipsUnreadFile(t *testing.T) {
	src := `outboxgen: 1
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
          x: int32
  B:
    type: b.b
    aggregate: B
    versions:
      1:
        fields:
          y: int32
`
	old := parse(t, src)
	lock := Update(old, nil)
	for name, edited := range map[string]string{
		"syntax":        strings.Replace(src, "x: int32", "x: {type: int32", 1),
		"top scalar":    "just text\n",
		"no events":     "outboxgen: 1\n",
		"events scalar": "outboxgen: 1\nevents: none\n",
		"event scalar":  strings.Replace(src, "  A:\n    type: a.a\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: int32\n", "  A: oops\n", 1),
	} {
		f, err := schema.Parse("events.yaml", []byte(edited))
		if err == nil {
			t.Fatalf("%s: Parse accepted it", name)
		}
		if errs := Check(f, lock, Options{LockPath: "events.lock"}); len(errs) != 0 {
			t.Errorf("%s: Check = %v, want nothing beyond the parse error %v", name, errs, err)
		}
		if errs := Against(f, old, "HEAD"); len(errs) != 0 {
			t.Errorf("%s: Against = %v, want nothing beyond the parse error %v", name, errs, err)
		}
	}
	// An event that is really gone still is reported.
	gone := strings.Replace(src, "  A:\n    type: a.a\n    aggregate: A\n    versions:\n      1:\n        fields:\n          x: int32\n", "", 1)
	if errs := Check(parse(t, gone), lock, Options{LockPath: "events.lock"}); len(errs) != 1 || !strings.Contains(errs[0].Msg, "no longer in the schema") {
		t.Errorf("event removed: Check = %v, want VERSION_FROZEN", errs)
	}
}

// TestDescribeChange: the VERSION_FROZEN message of -against names each
// wire change of a released version (and something whenever the
// fingerprint changed).
func TestDescribeChange(t *testing.T) {
	const schemaOf = `outboxgen: 1
types:
  Money:
    fields:
      units: int64
%MONEY%
events:
  A:
    type: a.a
    aggregate: A
    versions:
      1:
        fields:
%FIELDS%
`
	file := func(money, fields string) *schema.File {
		return parse(t, strings.NewReplacer("%MONEY%", money, "%FIELDS%", fields).Replace(schemaOf))
	}
	const (
		x = "          x: {type: int32, min: 1}\n"
		y = "          y: Money\n"
	)
	cases := []struct {
		name, money, fields, want string
	}{
		{"field added", "", x + y + "          z: {type: string, optional: true}\n", `"z" added`},
		{"field removed", "", x, `"y" removed`},
		{"type", "", "          x: {type: int64, min: 1}\n" + y, `"x": type int32 → int64`},
		{"constraint set and unset", "", "          x: {type: int32, max: 9}\n" + y, `"x": max none → 9; "x": min 1 → none`},
		{"optional", "", x + "          y: {type: Money, optional: true}\n", `"y": optional false → true`},
		{"nested object", "      cents: {type: int32, optional: true}", x + y, `"y": fields of Money changed`},
		{"list", "", x + "          y: list<Money>\n", `"y": type Money → list<Money>`},
		{"reordered", "", y + x, "fields reordered"},
	}
	old := file("", x+y)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := file(tc.money, tc.fields)
			ov, nv := old.Events[0].Versions[0], f.Events[0].Versions[0]
			if Fingerprint(old.Events[0], ov) == Fingerprint(f.Events[0], nv) {
				t.Fatal("fingerprint unchanged")
			}
			if got := describeChange(ov, nv); got != tc.want {
				t.Errorf("describeChange = %q, want %q", got, tc.want)
			}
		})
	}
}
