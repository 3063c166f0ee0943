package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const againstV1 = `outboxgen: 1
package: orders
enums:
  Method: [card, bank]
events:
  OrderPaid:
    type: orders.order_paid
    aggregate: Order
    versions:
      1:
        fields:
          order_id: uuid
          amount: int64
          method: {type: Method, values: [card]}
      2:
        draft: true
        fields:
          order_id: uuid
          amount: int64
          method: {type: Method, values: [card]}
          note: {type: string, optional: true}
  OrderShipped:
    type: orders.order_shipped
    aggregate: Order
    versions:
      1:
        fields:
          carrier: string
`

// againstEdited changes released OrderPaid v1 in place (amount's type, a
// new required field, a wider enum), reworks draft v2 freely and drops
// OrderShipped; the lock file is regenerated to match, as a user who edits
// both would do.
const againstEdited = `outboxgen: 1
package: orders
enums:
  Method: [card, bank]
events:
  OrderPaid:
    type: orders.order_paid
    aggregate: Order
    versions:
      1:
        fields:
          order_id: uuid
          amount: string
          method: Method
          currency: string
      2:
        fields:
          order_id: uuid
          amount: string
          method: Method
          currency: string
`

// gitRepo makes a git repository with the schema at svc/events.yaml (and
// its lock and generated files) committed, and returns the schema path.
func gitRepo(t *testing.T, schema string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found")
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "svc", "events.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runT(t, nil, path); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "v1"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", args[0], err, out)
		}
	}
	return path
}

// TestAgainstRevision: a released version edited in place, with the lock
// file regenerated to match, passes -check but fails -against HEAD with
// the changes named; drafts at HEAD may change; a dropped event is reported.
func TestAgainstRevision(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1)
	if err := os.WriteFile(path, []byte(againstEdited), 0o644); err != nil {
		t.Fatal(err)
	}
	lock := strings.TrimSuffix(path, ".yaml") + ".lock"
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runT(t, nil, path); code != 0 {
		t.Fatalf("regenerate with a new lock: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runT(t, nil, "-check", path); code != 0 {
		t.Fatalf("-check with the edited lock: exit %d: %s (the lock file no longer protects v1; -against must)", code, stderr)
	}
	before := snapshot(t, filepath.Dir(path))
	code, _, stderr := runT(t, nil, "-against", "HEAD", path)
	if code != 1 {
		t.Errorf("-against HEAD: exit %d, want 1", code)
	}
	want := []string{
		`events.yaml: OrderShipped: VERSION_FROZEN: event "orders.order_shipped" was released at HEAD and is no longer in the schema; keep it so old payloads still decode`,
		`events.yaml:10:7: OrderPaid v1: VERSION_FROZEN: version was released at HEAD and has changed since; revert the change and add a new version instead`,
		`events.yaml:13:11: OrderPaid v1: FIELD_SAME_TYPE (backward, against HEAD): "amount" is int64 in v1 at HEAD but string in v1; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name`,
		`events.yaml:13:11: OrderPaid v1: FIELD_SAME_TYPE (forward, against HEAD): "amount" is string in v1 but int64 in v1 at HEAD; keep the type (int32 may widen to int64; enum, decimal and uuid to string), or add a field with a new name`,
		`events.yaml:14:11: OrderPaid v1: ENUM_VALUE (forward, against HEAD): v1 may write "method"="bank", which v1 at HEAD does not accept`,
		`events.yaml:15:11: OrderPaid v1: FIELD_REQUIRED_MISSING (backward, against HEAD): v1 requires "currency" but v1 at HEAD does not write it; make it optional or give it a default`,
	}
	got := strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr, path, "events.yaml")), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-against HEAD (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, snapshot(t, filepath.Dir(path))); diff != "" {
		t.Errorf("-against wrote files:\n%s", diff)
	}

	// The same comparison against a file holding the old schema.
	old := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(old, []byte(againstV1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runT(t, nil, "-against", old, path)
	if code != 1 {
		t.Errorf("-against file: exit %d, want 1", code)
	}
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "HEAD", old)
	}
	got = strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr, path, "events.yaml")), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-against file (-want +got):\n%s", diff)
	}
}

// TestAgainstCompatible: adding a compatible version and changing only docs
// and drafts passes -against.
func TestAgainstCompatible(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1)
	edited := strings.Replace(againstV1, "      2:\n        draft: true\n", "      2:\n        doc: Now released.\n", 1)
	edited = strings.Replace(edited, "    aggregate: Order\n", "    aggregate: Order\n    doc: Paid.\n", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runT(t, nil, "-against", "HEAD", path); code != 0 || stderr != "" {
		t.Errorf("-against HEAD: exit %d: %s", code, stderr)
	}
}

// TestAgainstMissing: a revision that does not exist, and a schema that did
// not exist at the revision, are typed errors naming both.
func TestAgainstMissing(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1)
	code, _, stderr := runT(t, nil, "-against", "no-such-branch", path)
	if code != 1 || !strings.Contains(stderr, "-against no-such-branch: neither a file nor a revision of the repository") || !strings.Contains(stderr, "svc/events.yaml") {
		t.Errorf("unknown revision: exit %d: %s", code, stderr)
	}
	var ae *againstError
	if _, _, err := readAgainst(path, "no-such-branch"); !errors.As(err, &ae) || ae.Against != "no-such-branch" || ae.Rel != "svc/events.yaml" {
		t.Errorf("readAgainst(unknown revision) = %#v", err)
	}

	other := filepath.Join(filepath.Dir(path), "more.yaml")
	if err := os.WriteFile(other, []byte(againstV1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := readAgainst(other, "HEAD")
	if !errors.As(err, &ae) || ae.Against != "HEAD" || ae.Rel != "svc/more.yaml" {
		t.Fatalf("readAgainst(new file) = %#v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "svc/more.yaml does not exist at that revision") || !strings.Contains(msg, other) {
		t.Errorf("message %q names neither the revision path nor the schema", msg)
	}

	outside := setup(t, againstV1)
	if exec.Command("git", "-C", filepath.Dir(outside), "rev-parse").Run() == nil {
		return // the temporary directory is inside a repository here
	}
	if _, _, err := readAgainst(outside, "HEAD"); !errors.As(err, &ae) || !strings.Contains(err.Error(), "not a file, and the schema is not in a git repository") {
		t.Errorf("readAgainst outside a repository = %v", err)
	}
}
