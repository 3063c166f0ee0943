// Package readme_test keeps the repository's README.md honest: every Go and
// YAML snippet in it is a file of a program under examples/readme (compiled,
// vetted and run by those programs' own tests), and every package, path and
// version it names exists.
package readme_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// root is the repository root, relative to this package's directory.
const root = "../.."

// snippet is a fenced code block of the README.
type snippet struct {
	line   int    // line of the opening fence
	lang   string // the fence's info string
	source string // the file it must equal, from the marker above the fence
	text   string
}

// markerRE matches the comment that names a snippet's file, on the line
// right before its fence.
var markerRE = regexp.MustCompile(`^<!-- snippet: (\S+) -->$`)

func readme(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// snippets returns the README's fenced code blocks.
func snippets(t *testing.T, data []byte) []snippet {
	t.Helper()
	var (
		out  []snippet
		cur  *snippet
		prev string
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &snippet{line: n, lang: strings.TrimPrefix(line, "```")}
			if m := markerRE.FindStringSubmatch(prev); m != nil {
				cur.source = m[1]
			}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("README.md:%d: code block never closed", cur.line)
	}
	return out
}

// TestSnippetsAreTheExamples: every Go and YAML block of the README is
// preceded by <!-- snippet: path --> and is byte for byte the file at path,
// a file of a program under examples/readme that its tests run.
func TestSnippetsAreTheExamples(t *testing.T) {
	seen := 0
	for _, s := range snippets(t, readme(t)) {
		if s.lang != "go" && s.lang != "yaml" {
			if s.source != "" {
				t.Errorf("README.md:%d: a %q block has a snippet marker; only go and yaml blocks are compared", s.line, s.lang)
			}
			continue
		}
		if s.source == "" {
			t.Errorf("README.md:%d: %s block without a <!-- snippet: path --> line before it", s.line, s.lang)
			continue
		}
		if !strings.HasPrefix(s.source, "examples/readme/") {
			t.Errorf("README.md:%d: snippet %s is not under examples/readme/", s.line, s.source)
		}
		want, err := os.ReadFile(filepath.Join(root, s.source))
		if err != nil {
			t.Errorf("README.md:%d: %v", s.line, err)
			continue
		}
		if diff := cmp.Diff(string(want), s.text); diff != "" {
			t.Errorf("README.md:%d differs from %s (-file +README):\n%s", s.line, s.source, diff)
		}
		seen++
	}
	if seen == 0 {
		t.Error("no snippets found in README.md")
	}
}

// TestSetupCommands: the README's quickstart is exactly two commands, one that
// runs the quickstart on its embedded defaults and a test command that needs
// only Go (no -race, which needs cgo and a C compiler) and tests every
// module of go.work (./... stops at a module's edge).
func TestSetupCommands(t *testing.T) {
	var blocks []string
	for _, s := range snippets(t, readme(t)) {
		if s.lang == "sh" && strings.Contains(s.text, "examples/quickstart") {
			blocks = append(blocks, s.text)
		}
	}
	want := []string{"go run ./examples/quickstart\ngo test $(go list -m -f '{{.Dir}}/...')\n"}
	if diff := cmp.Diff(want, blocks); diff != "" {
		t.Errorf("set-up command blocks (-want +got):\n%s", diff)
	}
}

// TestGoVersion: the README states the go directive of go.mod as the Go
// version it needs.
func TestGoVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	want := "Go " + string(m[1]) + " or later"
	if !bytes.Contains(readme(t), []byte(want)) {
		t.Errorf("README.md does not say %q (go.mod: go %s)", want, m[1])
	}
}

// TestNamedPackagesExist: every package the README points at (go doc hints,
// pkg.go.dev links and the badge, go run/go test paths, relative links) exists,
// and no Go file sits at the repository root.
func TestNamedPackagesExist(t *testing.T) {
	const module = "github.com/gooutbox/outbox"
	data := string(readme(t))
	// check reports an error unless dir holds a Go package (or, when tests
	// is set, at least Go test files).
	check := func(what, dir string, tests bool) {
		t.Helper()
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			t.Errorf("%s names the module root, which has no package", what)
			return
		}
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, f := range files {
			if tests || !strings.HasSuffix(f, "_test.go") {
				return
			}
		}
		t.Errorf("%s: no Go package in %s", what, dir)
	}
	pkgRE := regexp.MustCompile(`(?:go doc |pkg\.go\.dev/(?:badge/)?)` + regexp.QuoteMeta(module) + `((?:/[A-Za-z0-9_]+)*)(?:\.svg)?[\s)` + "`" + `]`)
	found := 0
	for _, m := range pkgRE.FindAllStringSubmatch(data, -1) {
		check(strings.TrimSpace(m[0]), strings.TrimPrefix(m[1], "/"), false)
		found++
	}
	if found == 0 {
		t.Error("README.md names no package with go doc or pkg.go.dev")
	}
	for _, m := range regexp.MustCompile(`go (run|test)[^\n`+"`"+`]*? \./(\S+?)(?:/\.\.\.)?[\s`+"`"+`]`).FindAllStringSubmatch(data, -1) {
		if m[2] != "..." {
			check(strings.TrimSpace(m[0]), m[2], m[1] == "test")
		}
	}
	for _, m := range regexp.MustCompile(`\]\(((?:[a-z]+/)*[a-z]+)\)`).FindAllStringSubmatch(data, -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("link %s: %v", m[0], err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(root, "*.go")); len(files) != 0 {
		t.Errorf("Go files at the repository root: %v", files)
	}
}
