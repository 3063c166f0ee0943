package runtime_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoModRequiresOnlyWhatPackagesBuild guards what a user's `go get`
// resolves: every direct requirement in go.mod (a line without
// "// indirect") is a module that some non-test package of this module
// builds with — a library package, a test helper package such as kafkatest,
// or an example. A requirement that only a _test.go file needs would fail
// here; move such a test where it does not add to the module's requirements.
// (The "// indirect" lines are the go command's bookkeeping of the module
// graph and are left to go mod tidy.)
func TestGoModRequiresOnlyWhatPackagesBuild(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	inBlock := false
	sc := bufio.NewScanner(bytes.NewReader(mod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		direct = append(direct, strings.Fields(line)[0])
	}
	if len(direct) == 0 {
		t.Fatal("found no direct requirement in go.mod; the parser is out of date")
	}

	cmd := exec.Command(goCmd, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	built := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		built[m] = true
	}
	for _, m := range direct {
		if !built[m] {
			t.Errorf("go.mod requires %s, but no non-test package of the module builds with it (only tests do)", m)
		}
	}
}
