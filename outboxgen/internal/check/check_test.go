package check

import (
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
