package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gooutbox/outbox/outboxgen/internal/check"
	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// againstError is why the schema at -against cannot be read: the revision
// or file does not exist, the schema is not in it, or git failed. It names
// both what -against gave and the schema path.
type againstError struct {
	// Against is the -against value: a git revision or a file.
	Against string
	// Path is the schema file being checked (as given), Rel its path in
	// the repository when Against is a revision.
	Path, Rel string
	// Reason says what is missing.
	Reason string
	// Err is the underlying error (git's output), if any.
	Err error
	// NotAtRevision reports that the revision exists but the schema did
	// not exist there: the schema is new, which [againstCheck] accepts.
	NotAtRevision bool
}

func (e *againstError) Error() string {
	msg := fmt.Sprintf("outboxgen: -against %s: %s (schema %s", e.Against, e.Reason, e.Path)
	if e.Rel != "" && e.Rel != e.Path {
		msg += ", " + e.Rel + " in the repository"
	}
	msg += ")"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *againstError) Unwrap() error { return e.Err }

// againstCheck reads the schema as it is at against — an existing file, or
// else a git revision of the repository holding path — and returns the
// differences [check.Against] reports between it and f. A schema that did
// not exist at the revision is new: nothing was released from it there,
// so there is nothing to compare (its versions are checked with each other
// and the lock file as always).
func againstCheck(f *schema.File, path, against string) (schema.ErrorList, error) {
	data, oldPath, err := readAgainst(path, against)
	var ae *againstError
	if errors.As(err, &ae) && ae.NotAtRevision {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	old, err := schema.Parse(oldPath, data)
	if err != nil {
		return nil, fmt.Errorf("outboxgen: -against %s: the schema there does not parse:\n%w", against, err)
	}
	return check.Against(f, old, against), nil
}

// readAgainst returns the old schema and the name to report it under
// (<rev>:<path in the repository> for a revision).
func readAgainst(path, against string) ([]byte, string, error) {
	if st, err := os.Stat(against); err == nil && !st.IsDir() {
		data, err := os.ReadFile(against)
		if err != nil {
			return nil, "", &againstError{Against: against, Path: path, Reason: "cannot read the file", Err: err}
		}
		return data, against, nil
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil, "", fmt.Errorf("outboxgen: %w", err)
	}
	dir := filepath.Dir(abs)
	top, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, "", &againstError{Against: against, Path: path, Reason: "not a file, and the schema is not in a git repository", Err: err}
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, "", &againstError{Against: against, Path: path, Reason: "the schema is outside the repository " + top, Err: err}
	}
	rel = filepath.ToSlash(rel)
	if _, err := git(top, "rev-parse", "--verify", "--quiet", "--end-of-options", against+"^{commit}"); err != nil {
		return nil, "", &againstError{Against: against, Path: path, Rel: rel, Reason: "neither a file nor a revision of the repository " + top}
	}
	if _, err := git(top, "cat-file", "-e", "--end-of-options", against+":"+rel); err != nil {
		return nil, "", &againstError{Against: against, Path: path, Rel: rel, Reason: rel + " does not exist at that revision", NotAtRevision: true}
	}
	out, err := git(top, "show", "--end-of-options", against+":"+rel)
	if err != nil {
		return nil, "", &againstError{Against: against, Path: path, Rel: rel, Reason: "git show failed", Err: err}
	}
	return []byte(out), against + ":" + rel, nil
}

// git runs git in dir and returns its standard output; a failure carries
// git's standard error.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("git %s: %w: %s", args[0], err, msg)
		}
		return "", fmt.Errorf("git %s: %w", args[0], err)
	}
	if args[0] == "show" {
		return stdout.String(), nil
	}
	return strings.TrimSpace(stdout.String()), nil
}
