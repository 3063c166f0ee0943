package check

import (
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
		`events.yaml:15:11: A v3: FIELD_SAME_TYPE (backward): "x" is int32 in v1 but string in v3; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name`,
		`events.yaml:15:11: A v3: FIELD_SAME_TYPE (forward): "x" is string in v3 but int32 in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name`,
		`events.yaml:16:7: A v5: VERSION_CONTIGUOUS: expected v4; versions are numbered 1, 2, 3, ... without gaps`,
		`events.yaml:18:11: A v5: FIELD_SAME_TYPE (backward): "x" is int32 in v1 but string in v5; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name`,
		`events.yaml:18:11: A v5: FIELD_SAME_TYPE (forward): "x" is string in v5 but int32 in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name`,
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
	want := []string{"events.yaml:14:7: B v1: VERSION_FROZEN: released version changed (events.lock has sha256:" + strings.TrimPrefix(lock.Entries[1].Fingerprint, "sha256:")[:12] + ", the schema now gives " + short(Fingerprint(f.Events[1], f.Events[1].Versions[0])) + "); revert the change and add a new version instead"}
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
