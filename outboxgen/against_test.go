package main

import (
	"errors"
	"fmt"
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
		`events.yaml:10:7: OrderPaid v1: VERSION_FROZEN: version was released at HEAD and has changed since ("currency" added; "amount": type int64 → string; "method": values ["card"] → ["card","bank"]); revert the change and add a new version instead`,
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

// TestAgainstMissing: a revision that does not exist is a typed error
// naming both it and the schema; a schema that did not exist at the
// revision is one too, marked NotAtRevision (which run accepts, see
// TestAgainstNewSchema).
func TestAgainstMissing(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1)
	code, _, stderr := runT(t, nil, "-against", "no-such-branch", path)
	if code != 1 || !strings.Contains(stderr, "-against no-such-branch: neither a file nor a revision of the repository") || !strings.Contains(stderr, "svc/events.yaml") {
		t.Errorf("unknown revision: exit %d: %s", code, stderr)
	}
	var ae *againstError
	if _, _, err := readAgainst(path, "no-such-branch"); !errors.As(err, &ae) || ae.Against != "no-such-branch" || ae.Rel != "svc/events.yaml" || ae.NotAtRevision {
		t.Errorf("readAgainst(unknown revision) = %#v", err)
	}

	other := filepath.Join(filepath.Dir(path), "more.yaml")
	if err := os.WriteFile(other, []byte(againstV1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := readAgainst(other, "HEAD")
	if !errors.As(err, &ae) || ae.Against != "HEAD" || ae.Rel != "svc/more.yaml" || !ae.NotAtRevision {
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

// constraintSchema is the new-user trial's schema: three compatible
// versions of OrderPlaced, to which the tests add a v4 (and v5) that change
// constraints.
const constraintSchema = `outboxgen: 1
package: orders
events:
  OrderPlaced:
    type: orders.order_placed
    aggregate: Order
    versions:
      1:
        fields:
          first_name: string
          quantity: int64
      2:
        fields:
          first_name: string
          quantity: int64
          note: {type: string, optional: true}
      3:
        fields:
          first_name: string
          quantity: int64
          note: {type: string, optional: true}
`

// constraintV4 tightens first_name and quantity: the v4 decoder would
// reject v1 to v3 payloads once upcast.
const constraintV4 = `      4:
        fields:
          first_name: {type: string, max_length: 5}
          quantity: {type: int64, min: 1}
          note: {type: string, optional: true}
`

// TestAgainstConstraintTightened: a new version that tightens constraints
// fails -check and -against (FIELD_CONSTRAINT, backward, at the fields);
// so does a released version whose constraint was tightened in place,
// with the lock file regenerated.
func TestAgainstConstraintTightened(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, constraintSchema)
	if err := os.WriteFile(path, []byte(constraintSchema+constraintV4), 0o644); err != nil {
		t.Fatal(err)
	}
	// full_transitive: v4 against each of v1, v2 and v3.
	var want []string
	for _, c := range []string{`24:11: OrderPlaced v4: FIELD_CONSTRAINT (backward): max_length of "first_name" tightened from none in %[1]s to 5 in v4: v4 rejects values %[1]s may write`,
		`25:11: OrderPlaced v4: FIELD_CONSTRAINT (backward): min of "quantity" tightened from none in %[1]s to 1 in v4: v4 rejects values %[1]s may write`} {
		for _, old := range []string{"v1", "v2", "v3"} {
			want = append(want, "events.yaml:"+fmt.Sprintf(c, old)+"; keep the constraint, or mark the version breaking: true and write the upcaster that makes older values valid")
		}
	}
	for _, args := range [][]string{{"-check"}, {"-against", "HEAD"}} {
		code, _, stderr := runT(t, nil, append(args, path)...)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr, path, "events.yaml")), "\n") {
			if strings.Contains(l, "FIELD_CONSTRAINT") {
				got = append(got, l)
			}
		}
		if code != 1 || !cmp.Equal(want, got) {
			t.Errorf("%v: exit %d, FIELD_CONSTRAINT lines (-want +got):\n%s\nstderr: %s", args, code, cmp.Diff(want, got), stderr)
		}
	}
	// Marked breaking, v4 starts a new line with a hand-written upcaster.
	breaking := strings.Replace(constraintV4, "      4:\n", "      4:\n        breaking: true\n", 1)
	if err := os.WriteFile(path, []byte(constraintSchema+breaking), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runT(t, nil, "-against", "HEAD", path); code != 0 {
		t.Errorf("breaking v4: exit %d: %s", code, stderr)
	}

	// Released v3 tightened in place, lock regenerated: -against catches it.
	inPlace := strings.Replace(constraintSchema, "          quantity: int64\n          note: {type: string, optional: true}\n",
		"          quantity: int64\n          note: {type: string, optional: true, max_length: 9}\n", 2)
	inPlace = strings.Replace(inPlace, "note: {type: string, optional: true, max_length: 9}", "note: {type: string, optional: true}", 1)
	if err := os.WriteFile(path, []byte(inPlace), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(strings.TrimSuffix(path, ".yaml") + ".lock"); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runT(t, nil, "-against", "HEAD", path)
	want = []string{
		`events.yaml:17:7: OrderPlaced v3: VERSION_FROZEN: version was released at HEAD and has changed since ("note": max length none → 9); revert the change and add a new version instead`,
		`events.yaml:21:11: OrderPlaced v3: FIELD_CONSTRAINT (backward): max_length of "note" tightened from none in v2 to 9 in v3: v3 rejects values v2 may write; keep the constraint, or mark the version breaking: true and write the upcaster that makes older values valid`,
		`events.yaml:21:11: OrderPlaced v3: FIELD_CONSTRAINT (backward, against HEAD): max_length of "note" tightened from none in v3 at HEAD to 9 in v3: v3 rejects values v3 at HEAD may write; keep the constraint, or mark the version breaking: true and write the upcaster that makes older values valid`,
	}
	got := strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr, path, "events.yaml")), "\n")
	if diff := cmp.Diff(want, got); code != 1 || diff != "" {
		t.Errorf("-against HEAD after an in-place change: exit %d (-want +got):\n%s", code, diff)
	}
}

// TestAgainstNewSchema: a schema file that did not exist at the revision
// (new in the pull request) is new, not an error: -against passes, and the
// usual rules still apply to its versions.
func TestAgainstNewSchema(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1)
	other := filepath.Join(filepath.Dir(path), "hand", "events.yaml")
	if err := os.MkdirAll(filepath.Dir(other), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte(constraintSchema), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runT(t, nil, other); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{{"-against", "HEAD"}, {"-check", "-against", "HEAD"}} {
		if code, _, stderr := runT(t, nil, append(args, other)...); code != 0 || stderr != "" {
			t.Errorf("%v on a new schema: exit %d: %s", args, code, stderr)
		}
	}
	if err := os.WriteFile(other, []byte(constraintSchema+constraintV4), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runT(t, nil, "-against", "HEAD", other)
	if code != 1 || !strings.Contains(stderr, "FIELD_CONSTRAINT (backward)") || strings.Contains(stderr, "does not exist") {
		t.Errorf("-against HEAD on a new schema with a broken rule: exit %d: %s", code, stderr)
	}
}

// TestAgainstSyntaxError: a schema that does not parse is reported with
// its parse error only, compared with neither the lock file nor the
// revision (whose released versions would all seem gone).
func TestAgainstSyntaxError(t *testing.T) {
	t.Parallel()
	path := gitRepo(t, againstV1)
	broken := strings.Replace(againstV1, "          amount: int64\n", "          amount: {type: int64\n", 1)
	if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-check"}, {"-against", "HEAD"}, {}} {
		code, _, stderr := runT(t, nil, append(args, path)...)
		want := "events.yaml:13:19: syntax error: did not find expected ',' or '}'\n"
		if got := strings.ReplaceAll(stderr, path, "events.yaml"); code != 1 || got != want {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", args, code, got, want)
		}
	}
}
