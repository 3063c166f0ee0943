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

// TestPostgresKafkaServiceRequiresLittle guards what a PostgreSQL + Kafka
// service pays for the packages it imports: a module that imports hooks,
// runtime, runtime/relay, runtime/sqlstore, runtime/consumer and
// adapters/kafka has at most 50 modules in its go list -m all, and none of
// the SQLite or MySQL drivers, franz-go or a vendor cloud SDK. go mod tidy
// there reads the go.mod files of the whole module graph: its first run
// may download those the repository's build did not need, through the
// caller's GOPROXY (and checks them against GOSUMDB); offline, without
// them in the module cache, the test skips (fails under
// OUTBOX_TEST_REQUIRE_INTEGRATION=1).
func TestPostgresKafkaServiceRequiresLittle(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/service\n\ngo 1.26.0\n\nrequire github.com/gooutbox/outbox v0.0.0\n\nreplace github.com/gooutbox/outbox => " + root + "\n",
		"main.go": `package main

import (
	_ "github.com/gooutbox/outbox/adapters/kafka"
	_ "github.com/gooutbox/outbox/hooks"
	_ "github.com/gooutbox/outbox/runtime"
	_ "github.com/gooutbox/outbox/runtime/consumer"
	_ "github.com/gooutbox/outbox/runtime/relay"
	_ "github.com/gooutbox/outbox/runtime/sqlstore"
)

func main() {}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil && offline(out) && os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") != "1" {
			t.Skipf("go %s needs modules the module cache lacks, and the module proxy does not answer (GOPROXY=%s):\n%s", strings.Join(args, " "), os.Getenv("GOPROXY"), out)
		}
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	mods := strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	if len(mods) > 50 {
		t.Errorf("a PostgreSQL + Kafka service has %d modules in go list -m all, want at most 50:\n%s", len(mods), strings.Join(mods, "\n"))
	}
	for _, m := range mods {
		for _, heavy := range []string{"github.com/glebarez/", "modernc.org/", "github.com/go-sql-driver/mysql", "gorm.io/driver/mysql", "gorm.io/driver/sqlite", "github.com/mattn/go-sqlite3", "github.com/twmb/franz-go", "github.com/aws/", "github.com/Azure/"} {
			if strings.HasPrefix(m, heavy) {
				t.Errorf("a PostgreSQL + Kafka service requires %s", m)
			}
		}
	}
}

// offline reports whether the go command's output says it could not reach
// the module proxy or the checksum database.
func offline(out []byte) bool {
	for _, s := range []string{"module lookup disabled", "dial tcp", "no such host", "connection refused", "i/o timeout"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}
