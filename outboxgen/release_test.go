package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUncommittedVersionsAreNotFrozen: a version generated but whose lock
// line is not committed yet (a local experiment) may change or go away,
// generation recording it as it now is; a committed line binds (found by a
// new user: a v3 tried and reverted, never deployed, could only be undone
// by hand-editing the "do not edit" lock file).
func TestUncommittedVersionsAreNotFrozen(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1) // OrderPaid v1 and OrderShipped v1 committed with their lock lines
	lockPath := strings.TrimSuffix(path, ".yaml") + ".lock"
	write := func(schema string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(schema), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	generate := func(what string, wantCode int, want string) {
		t.Helper()
		code, _, stderr := runT(t, nil, path)
		if code != wantCode || !strings.Contains(stderr, want) {
			t.Fatalf("%s: exit %d, stderr %q; want exit %d with %q", what, code, stderr, wantCode, want)
		}
	}
	lockHas := func(line string) bool {
		t.Helper()
		b, err := os.ReadFile(lockPath)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(b), line)
	}
	v2 := strings.Replace(againstV1, "        draft: true\n", "", 1) // OrderPaid v2 released locally
	write(v2)
	generate("v2 out of draft", 0, "")
	if !lockHas("orders.order_paid 2 ") {
		t.Fatal("the lock file does not record v2")
	}
	// Changed before its lock line was committed: not frozen.
	write(strings.Replace(v2, "          note: {type: string, optional: true}\n", "          note: {type: string, optional: true, max_length: 200}\n", 1))
	generate("v2 changed, uncommitted", 0, "")
	// Dropped: forgotten.
	write(strings.Replace(againstV1, "      2:\n        draft: true\n        fields:\n          order_id: uuid\n          amount: int64\n          method: {type: Method, values: [card]}\n          note: {type: string, optional: true}\n", "", 1))
	generate("v2 dropped, uncommitted", 0, "")
	if lockHas("orders.order_paid 2 ") {
		t.Error("the lock file still records the dropped v2")
	}
	// v1 was committed: it binds.
	write(strings.Replace(againstV1, "          amount: int64\n          method: {type: Method, values: [card]}\n      2:", "          amount: string\n          method: {type: Method, values: [card]}\n      2:", 1))
	generate("committed v1 changed", 1, "OrderPaid v1: VERSION_FROZEN: released version changed")
	// v2 again, committed: now it binds too.
	write(v2)
	generate("v2 again", 0, "")
	cmd := exec.Command("git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "commit", "-q", "-am", "v2")
	cmd.Dir = filepath.Dir(filepath.Dir(path))
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	write(strings.Replace(v2, "          note: {type: string, optional: true}\n", "          note: {type: string, optional: true, max_length: 200}\n", 1))
	generate("committed v2 changed", 1, "OrderPaid v2: VERSION_FROZEN: released version changed")
}
