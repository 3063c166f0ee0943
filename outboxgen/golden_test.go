package main

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// outputFile reports whether a golden case file is produced by outboxgen
// (and so compared and rewritten) rather than an input.
func outputFile(rel string) bool {
	return strings.HasSuffix(rel, ".gen.go") || strings.HasSuffix(rel, ".lock") && !strings.Contains(rel, "input") ||
		strings.HasPrefix(rel, "export/") || rel == "stderr.txt"
}

// TestGolden runs outboxgen on every case under testdata/ in a temporary
// copy and compares the generated files, the lock file, the exports and
// stderr with the ones committed. A case may hold:
//
//	events.yaml       the schema (required)
//	args.txt          extra flags, one per line
//	input.lock        a lock file present before the run (as events.lock)
//	*.go, payloads/   hand-written code and fixtures (inputs)
//	*.gen.go, events.lock, export/   expected outputs
//	stderr.txt        expected diagnostics (absent: the run must succeed)
//
// go test ./outboxgen -update rewrites the expected outputs.
func TestGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/*/events.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no golden cases")
	}
	for _, schemaPath := range cases {
		caseDir := filepath.Dir(schemaPath)
		name := filepath.Base(caseDir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, code := runCase(t, caseDir)
			_, wantFail := got["stderr.txt"]
			if wantFail != (code != 0) {
				t.Errorf("exit code %d with stderr %q", code, got["stderr.txt"])
			}
			if *update {
				writeCase(t, caseDir, got)
				return
			}
			want := readOutputs(t, caseDir)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("outboxgen %s: outputs differ from testdata (-want +got); run go test ./outboxgen -update if the change is intended:\n%s", name, diff)
			}
		})
	}
}

// runCase copies a case's inputs into <tmp>/<case>/ under a go.mod (so the
// source path in headers is <case>/events.yaml, as in testdata), runs
// outboxgen there and returns its outputs by relative path.
func runCase(t *testing.T, caseDir string) (map[string]string, int) {
	t.Helper()
	root := t.TempDir()
	name := filepath.Base(caseDir)
	dir := filepath.Join(root, name)
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/golden\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var args []string
	err := filepath.WalkDir(caseDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(caseDir, p)
		rel = filepath.ToSlash(rel)
		if outputFile(rel) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch rel {
		case "args.txt":
			args = append(args, strings.Fields(string(data))...)
			return nil
		case "input.lock":
			rel = "events.lock"
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		if a == "-export" && i+1 < len(args) {
			args[i+1] = filepath.Join(dir, args[i+1])
		}
	}
	var stdout, stderr bytes.Buffer
	code := runEnv(append(args, filepath.Join(dir, "events.yaml")), &stdout, &stderr, func(string) string { return "" })
	got := map[string]string{}
	if code != 0 || stderr.Len() > 0 {
		got["stderr.txt"] = strings.ReplaceAll(stderr.String(), dir+string(filepath.Separator), "")
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if !outputFile(rel) {
			return nil
		}
		if rel == "events.lock" {
			if in, err := os.ReadFile(filepath.Join(caseDir, "input.lock")); err == nil {
				if data, _ := os.ReadFile(p); bytes.Equal(in, data) {
					return nil // unchanged input
				}
			}
		}
		data, err := os.ReadFile(p)
		got[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, code
}

func readOutputs(t *testing.T, caseDir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(caseDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(caseDir, p)
		rel = filepath.ToSlash(rel)
		if !outputFile(rel) {
			return nil
		}
		data, err := os.ReadFile(p)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeCase(t *testing.T, caseDir string, got map[string]string) {
	t.Helper()
	for rel := range readOutputs(t, caseDir) {
		if _, ok := got[rel]; !ok {
			if err := os.Remove(filepath.Join(caseDir, filepath.FromSlash(rel))); err != nil {
				t.Fatal(err)
			}
		}
	}
	names := make([]string, 0, len(got))
	for rel := range got {
		names = append(names, rel)
	}
	slices.Sort(names)
	for _, rel := range names {
		p := filepath.Join(caseDir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got[rel]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoldenCompiles builds, vets and tests the golden packages in the
// testdata module (replace github.com/gooutbox/outbox => ../..), as a user's
// module outside the repository's go.work (GOWORK=off): the
// committed generated code compiles against this runtime, is vet-clean, and
// the round-trip tests next to it decode stored payloads of every version.
func TestGoldenCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the golden packages with the go command")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = "testdata"
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("go %s in testdata: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
