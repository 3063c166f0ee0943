package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const sampleSchema = `outboxgen: 1
package: sample
events:
  OrderPlaced:
    type: orders.order_placed
    aggregate: Order
    versions:
      1:
        fields:
          customer: string
  OrderPaid:
    type: orders.order_paid
    aggregate: Order
    versions:
      1:
        fields:
          method: string
`

// setup writes a schema into a fresh module and returns the schema path.
func setup(t *testing.T, schema string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "events.yaml")
	if err := os.WriteFile(p, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runT(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runEnv(args, &stdout, &stderr, func(k string) string { return env[k] })
	return code, stdout.String(), stderr.String()
}

func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	schema, err := os.ReadFile("testdata/alltypes/events.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := setup(t, string(schema)), setup(t, string(schema))
	for _, p := range []string{a, b} {
		if code, _, stderr := runT(t, nil, p); code != 0 {
			t.Fatalf("outboxgen %s: exit %d: %s", p, code, stderr)
		}
	}
	first := snapshot(t, filepath.Dir(a))
	if diff := cmp.Diff(first, snapshot(t, filepath.Dir(b))); diff != "" {
		t.Errorf("two generations differ (-first +second):\n%s", diff)
	}
	// A second run in the same directory changes no byte and touches no
	// file.
	before := map[string]time.Time{}
	for name := range first {
		st, err := os.Stat(filepath.Join(filepath.Dir(a), name))
		if err != nil {
			t.Fatal(err)
		}
		before[name] = st.ModTime()
	}
	if code, _, stderr := runT(t, nil, a); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if diff := cmp.Diff(first, snapshot(t, filepath.Dir(a))); diff != "" {
		t.Errorf("second run changed files (-first +second):\n%s", diff)
	}
	for name, mt := range before {
		st, _ := os.Stat(filepath.Join(filepath.Dir(a), name))
		if !st.ModTime().Equal(mt) {
			t.Errorf("second run rewrote %s", name)
		}
	}
	if code, _, stderr := runT(t, nil, "-check", a); code != 0 {
		t.Errorf("-check after generation: exit %d: %s", code, stderr)
	}
}

func TestCheckStale(t *testing.T) {
	t.Parallel()
	p := setup(t, sampleSchema)
	dir := filepath.Dir(p)
	code, _, stderr := runT(t, nil, "-check", p)
	if code != 1 || !strings.Contains(stderr, "order_paid.gen.go: missing (run go generate)") {
		t.Errorf("-check before generation: exit %d, stderr %q; want 1 and a missing file", code, stderr)
	}
	if len(snapshot(t, dir)) != 2 {
		t.Errorf("-check wrote files: %v", snapshot(t, dir))
	}
	if code, _, stderr := runT(t, nil, p); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}

	// An edited generated file is stale.
	gen := filepath.Join(dir, "order_paid.gen.go")
	orig, _ := os.ReadFile(gen)
	if err := os.WriteFile(gen, append(orig, "// edited\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runT(t, nil, "-check", p)
	if code != 1 || !strings.Contains(stderr, "order_paid.gen.go: stale") {
		t.Errorf("-check with an edited file: exit %d, stderr %q", code, stderr)
	}
	if got, _ := os.ReadFile(gen); !bytes.Equal(got, append(orig, "// edited\n"...)) {
		t.Error("-check rewrote a file")
	}

	// Removing an event leaves its file stale; generating deletes it.
	if err := os.WriteFile(p, []byte(strings.Split(sampleSchema, "  OrderPaid:")[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The lock still records OrderPaid v1, so removing it is VERSION_FROZEN.
	code, _, stderr = runT(t, nil, p)
	if code != 1 || !strings.Contains(stderr, "VERSION_FROZEN") {
		t.Errorf("generate after removing a released event: exit %d, stderr %q", code, stderr)
	}
	if err := os.Remove(filepath.Join(dir, "events.lock")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runT(t, nil, "-check", p)
	if code != 1 || !strings.Contains(stderr, "order_paid.gen.go: no longer generated") {
		t.Errorf("-check after removing an event: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runT(t, nil, p); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(gen); !os.IsNotExist(err) {
		t.Errorf("stale generated file %s was not deleted: %v", gen, err)
	}
}

func TestCheckLockStale(t *testing.T) {
	t.Parallel()
	p := setup(t, sampleSchema)
	if code, _, stderr := runT(t, nil, p); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	lock := filepath.Join(filepath.Dir(p), "events.lock")
	data, _ := os.ReadFile(lock)
	lines := strings.SplitAfter(string(data), "\n")
	if err := os.WriteFile(lock, []byte(strings.Join(lines[:len(lines)-2], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runT(t, nil, "-check", p)
	if code != 1 || !strings.Contains(stderr, "events.lock: stale") {
		t.Errorf("-check with a stale lock: exit %d, stderr %q", code, stderr)
	}
}

func TestRefuseOverwrite(t *testing.T) {
	t.Parallel()
	p := setup(t, sampleSchema)
	hand := filepath.Join(filepath.Dir(p), "order_paid.gen.go")
	if err := os.WriteFile(hand, []byte("package sample\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runT(t, nil, p)
	if code != 1 || !strings.Contains(stderr, "was not generated by outboxgen; refusing to overwrite") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	if got, _ := os.ReadFile(hand); string(got) != "package sample\n" {
		t.Errorf("hand-written file overwritten: %q", got)
	}
}

func TestPackageName(t *testing.T) {
	t.Parallel()
	noPkg := strings.Replace(sampleSchema, "package: sample\n", "", 1)
	tests := []struct {
		name, schema string
		env          map[string]string
		args         []string
		want         string
		wantErr      string
	}{
		{name: "schema", schema: sampleSchema, want: "package sample"},
		{name: "flag", schema: sampleSchema, args: []string{"-package", "other"}, want: "package other"},
		{name: "GOPACKAGE", schema: noPkg, env: map[string]string{"GOPACKAGE": "fromenv"}, want: "package fromenv"},
		{name: "conflict", schema: sampleSchema, env: map[string]string{"GOPACKAGE": "fromenv"}, wantErr: `events.yaml:2:10: package "sample" disagrees with $GOPACKAGE "fromenv"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := setup(t, tt.schema)
			code, _, stderr := runT(t, tt.env, append(tt.args, p)...)
			if tt.wantErr != "" {
				if code != 1 || !strings.Contains(stderr, tt.wantErr) {
					t.Errorf("exit %d, stderr %q; want %q", code, stderr, tt.wantErr)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			got, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "events.gen.go"))
			if !strings.Contains(string(got), "\n"+tt.want+"\n") {
				t.Errorf("events.gen.go lacks %q:\n%s", tt.want, got)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	if code, _, stderr := runT(t, nil); code != 2 || !strings.Contains(stderr, "usage: outboxgen") {
		t.Errorf("no arguments: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runT(t, nil, "-nope", "x.yaml"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code, _, stderr := runT(t, nil, filepath.Join(t.TempDir(), "missing.yaml")); code != 1 || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing schema: exit %d, stderr %q", code, stderr)
	}
}

// bigSchema returns a schema of n events with v versions each, every
// version adding an optional field to a handful of typed ones.
func bigSchema(n, v int) string {
	var b strings.Builder
	b.WriteString("outboxgen: 1\npackage: big\nenums:\n  Status: [open, closed, cancelled]\ntypes:\n  Money:\n    fields:\n      value: decimal\n      currency: {type: string, pattern: \"^[A-Z]{3}$\"}\nevents:\n")
	for i := range n {
		fmt.Fprintf(&b, "  Event%d:\n    type: big.event_%d\n    aggregate: Thing\n    doc: Event number %d.\n    versions:\n", i, i, i)
		for ver := 1; ver <= v; ver++ {
			fmt.Fprintf(&b, "      %d:\n        fields:\n", ver)
			b.WriteString("          id: uuid\n          amount: Money\n          status: Status\n          count: {type: int32, min: 0}\n          note: {type: string, optional: true, max_length: 100}\n          tags: \"list<string>\"\n          at: timestamp\n")
			for k := 2; k <= ver; k++ {
				fmt.Fprintf(&b, "          extra_%d: {type: int64, default: %d}\n", k, k)
			}
		}
	}
	return b.String()
}

// BenchmarkGenerate measures a whole run (parse, check, generate, format,
// compare with the files on disk) on a schema of 50 events × 3 versions.
func BenchmarkGenerate(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "events.yaml")
	if err := os.WriteFile(p, []byte(bigSchema(50, 3)), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		// Remove the outputs so every iteration generates and writes.
		files, _ := filepath.Glob(filepath.Join(dir, "*.gen.go"))
		for _, f := range files {
			os.Remove(f)
		}
		os.Remove(filepath.Join(dir, "events.lock"))
		var stderr bytes.Buffer
		if code := runEnv([]string{p}, io.Discard, &stderr, func(string) string { return "" }); code != 0 {
			b.Fatalf("exit %d: %s", code, stderr.String())
		}
	}
}

// TestGeneratedCodeCompiles generates a 5 × 3 schema into a temporary
// module that replaces github.com/gooutbox/outbox with this repository,
// then builds and vets it.
func TestGeneratedCodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/m\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/gooutbox/outbox v0.0.0\n\tgithub.com/google/uuid v1.6.0\n)\n\nreplace github.com/gooutbox/outbox => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"go.mod": gomod, "go.sum": string(sum), "big/events.yaml": bigSchema(5, 3)} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runT(t, nil, filepath.Join(dir, "big", "events.yaml")); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestRepoSchemasUpToDate runs outboxgen -check on every schema of the
// repository outside testdata, so go test fails when someone edits a
// schema or a generated file without regenerating (the CI freshness
// check).
func TestRepoSchemasUpToDate(t *testing.T) {
	t.Parallel()
	schemas, err := filepath.Glob("../examples/*/events.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(schemas) == 0 {
		t.Fatal("no schemas under examples/")
	}
	for _, p := range schemas {
		if code, _, stderr := runT(t, map[string]string{"GOPACKAGE": "main"}, "-check", p); code != 0 {
			t.Errorf("outboxgen -check %s: exit %d (run go generate ./...):\n%s", p, code, stderr)
		}
	}
}

// allProblemsSchema holds, in one file, a version gap (OrderPaid v1 → v3), a
// field dropped without a tombstone, a type change, an enum value added under
// full_transitive, a new required field, a dropped name coming back, an
// optionality change, parse errors in one event (OrderShipped: an unknown
// type, a misspelled key) and in another event's mode (OrderRefunded).
const allProblemsSchema = `outboxgen: 1
compatibility: full_transitive
enums:
  Method: [card, bank, wallet]
events:
  OrderPaid:
    type: orders.order_paid
    aggregate: Order
    versions:
      1:
        fields:
          order_id: uuid
          amount: int64
          note: string
          method: {type: Method, values: [card]}
      3:
        fields:
          order_id: uuid
          amount: string
          method: {type: Method, values: [card, bank]}
          currency: string
      4:
        fields:
          order_id: uuid
          amount: string
          method: {type: Method, values: [card, bank]}
          currency: string
          note: {type: string, optional: true}
  OrderShipped:
    type: orders.order_shipped
    aggregate: Order
    versions:
      1:
        fields:
          carrier: Carier
          weight: {type: int32, minimum: 1}
      2:
        fields:
          carrier: string
          weight: int32
          tracking: string
  OrderCancelled:
    type: orders.order_cancelled
    aggregate: Order
    compatibility: backward
    versions:
      1:
        fields:
          reason: {type: string, optional: true}
      2:
        fields:
          reason: string
  OrderRefunded:
    type: orders.order_refunded
    aggregate: Order
    compatibility: ful
    versions:
      1:
        fields:
          amount: int64
      2:
        fields:
          amount: string
`

// TestAllProblemsInOneRun: every problem of a file is reported in one run,
// sorted by position, each at its own line:col. The gap does not stop the
// v1 → v3 and v1 → v4 checks, and parse errors in OrderShipped and
// OrderRefunded do not hide the rule violations of the other events (the
// broken events themselves are not compared: their versions are unknown).
func TestAllProblemsInOneRun(t *testing.T) {
	t.Parallel()
	path := setup(t, allProblemsSchema)
	code, _, stderr := runT(t, nil, "-check", "-package", "orders", path)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := []string{
		`events.yaml:16:7: OrderPaid v3: FIELD_REMOVED_UNRESERVED: "note" (a field of v1) dropped without listing it under removed:`,
		`events.yaml:16:7: OrderPaid v3: FIELD_REQUIRED_MISSING (forward): v1 requires "note" but v3 does not write it; make it optional or give it a default, or mark v3 breaking: true and write its upcaster`,
		`events.yaml:16:7: OrderPaid v3: VERSION_CONTIGUOUS: expected v2; versions are numbered 1, 2, 3, ... without gaps`,
		`events.yaml:19:11: OrderPaid v3: FIELD_SAME_TYPE (backward): "amount" is int64 in v1 but string in v3; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v3 breaking: true and write its upcaster`,
		`events.yaml:19:11: OrderPaid v3: FIELD_SAME_TYPE (forward): "amount" is string in v3 but int64 in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v3 breaking: true and write its upcaster`,
		`events.yaml:20:11: OrderPaid v3: ENUM_VALUE (forward): v3 may write "method"="bank", which v1 does not accept`,
		`events.yaml:21:11: OrderPaid v3: FIELD_REQUIRED_MISSING (backward): v3 requires "currency" but v1 does not write it; make it optional or give it a default, or mark v3 breaking: true and write its upcaster`,
		`events.yaml:25:11: OrderPaid v4: FIELD_SAME_TYPE (backward): "amount" is int64 in v1 but string in v4; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v4 breaking: true and write its upcaster`,
		`events.yaml:25:11: OrderPaid v4: FIELD_SAME_TYPE (forward): "amount" is string in v4 but int64 in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name, or mark v4 breaking: true and write its upcaster`,
		`events.yaml:26:11: OrderPaid v4: ENUM_VALUE (forward): v4 may write "method"="bank", which v1 does not accept`,
		`events.yaml:27:11: OrderPaid v4: FIELD_REQUIRED_MISSING (backward): v4 requires "currency" but v1 does not write it; make it optional or give it a default, or mark v4 breaking: true and write its upcaster`,
		`events.yaml:28:11: OrderPaid v4: FIELD_NAME_REUSED: "note" was dropped in v3 and may not come back; choose a new name`,
		`events.yaml:28:11: OrderPaid v4: FIELD_OPTIONALITY (forward): v1 requires "note" but v4 may omit it; keep it optional or give it a default, or mark v4 breaking: true and write its upcaster`,
		`events.yaml:35:20: OrderShipped v1: field "carrier": unknown type "Carier" (built-in types: bool, decimal, int32, int64, string, timestamp, uuid, list<T>, map<string,T>; or a name under enums: or types:)`,
		`events.yaml:36:33: OrderShipped v1: field "weight": unknown key "minimum"; did you mean "min"? (known keys: type, doc, optional, default, min, max, max_length, pattern, values, deprecated)`,
		`events.yaml:52:11: OrderCancelled v2: FIELD_OPTIONALITY (backward): v2 requires "reason" but v1 may omit it; keep it optional or give it a default, or mark v2 breaking: true and write its upcaster`,
		`events.yaml:56:20: event OrderRefunded: unknown compatibility mode "ful"; did you mean "full"? (one of: none, backward, backward_transitive, forward, forward_transitive, full, full_transitive)`,
	}
	got := strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr, path, "events.yaml")), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
	// Generation (without -check) reports the same and writes nothing.
	code, _, stderr2 := runT(t, nil, "-package", "orders", path)
	if code != 1 || stderr2 != stderr {
		t.Errorf("without -check: exit %d, stderr differs: %v", code, stderr2 != stderr)
	}
	if files := snapshot(t, filepath.Dir(path)); len(files) != 2 {
		t.Errorf("files written: %v", slices.Collect(maps.Keys(files)))
	}
}

// TestConstraintMinReader: the min reader version follows constraints. In
// full_transitive mode a v5 that only adds a field reads as v4 (the start
// of its line after breaking v4); a v5 that loosens v4's constraints is
// rejected (FIELD_CONSTRAINT, forward: a v4 reader would reject its
// payloads) unless it is breaking, which makes v5 its own min reader; in
// backward mode, which declares no old reader, the loosening is accepted
// and v5 is its own min reader.
func TestConstraintMinReader(t *testing.T) {
	t.Parallel()
	v4 := strings.Replace(constraintV4, "      4:\n", "      4:\n        breaking: true\n", 1)
	keep := "      5:\n        fields:\n          first_name: {type: string, max_length: 5}\n          quantity: {type: int64, min: 1}\n          note: {type: string, optional: true}\n          extra: {type: string, optional: true}\n"
	loosen := "      5:\n        fields:\n          first_name: string\n          quantity: int64\n          note: {type: string, optional: true}\n"
	minReader := func(t *testing.T, src string) (int, string) {
		t.Helper()
		p := setup(t, src)
		code, _, stderr := runT(t, nil, p)
		if code != 0 {
			return 0, strings.ReplaceAll(stderr, p, "events.yaml")
		}
		gen, err := os.ReadFile(filepath.Join(filepath.Dir(p), "order_placed.gen.go"))
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for _, l := range strings.Split(string(gen), "\n") {
			if _, err := fmt.Sscanf(l, "func (OrderPlacedV5) EventMinReader() int { return %d }", &n); err == nil {
				return n, ""
			}
		}
		t.Fatalf("no OrderPlacedV5.EventMinReader in\n%s", gen)
		return 0, ""
	}
	if n, stderr := minReader(t, constraintSchema+v4+keep); n != 4 {
		t.Errorf("v5 keeping the constraints: min reader %d, want 4 (%s)", n, stderr)
	}
	n, stderr := minReader(t, constraintSchema+v4+loosen)
	if n != 0 || !strings.Contains(stderr, `events.yaml:30:11: OrderPlaced v5: FIELD_CONSTRAINT (forward): max_length of "first_name" loosened from 5 in v4 to none in v5: v4 rejects values v5 may write`) ||
		!strings.Contains(stderr, `events.yaml:31:11: OrderPlaced v5: FIELD_CONSTRAINT (forward): min of "quantity" loosened from 1 in v4 to none in v5: v4 rejects values v5 may write`) {
		t.Errorf("v5 loosening in full_transitive: min reader %d, stderr %s; want FIELD_CONSTRAINT (forward) errors", n, stderr)
	}
	if n, stderr := minReader(t, constraintSchema+v4+strings.Replace(loosen, "      5:\n", "      5:\n        breaking: true\n", 1)); n != 5 {
		t.Errorf("breaking v5: min reader %d, want 5 (%s)", n, stderr)
	}
	backward := strings.Replace(constraintSchema, "    aggregate: Order\n", "    aggregate: Order\n    compatibility: backward\n", 1)
	if n, stderr := minReader(t, backward+v4+loosen); n != 5 {
		t.Errorf("v5 loosening in backward mode: min reader %d, want 5 (%s)", n, stderr)
	}
}
