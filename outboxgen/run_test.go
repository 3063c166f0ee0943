package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
