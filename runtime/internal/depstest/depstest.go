// Package depstest checks, from a package's tests, which packages it
// depends on: the promises "runtime imports only the standard library and
// uuid", "the storage layer needs no GORM", and their kind.
package depstest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Deps returns the import paths of the non-standard packages that the
// package in the test's working directory depends on, itself included. It
// skips t when the go command is not on PATH.
func Deps(t testing.TB) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	return strings.Fields(string(out))
}

// Only fails t for each dependency (see [Deps]) that is not in allowed.
func Only(t testing.TB, allowed ...string) {
	t.Helper()
	for _, dep := range Deps(t) {
		if !slices.Contains(allowed, dep) {
			t.Errorf("depends on %s; it may import only the standard library and %s", dep, strings.Join(allowed, ", "))
		}
	}
}

// Check fails t for each dependency (see [Deps]) whose import path starts
// with one of forbidden, and for each of required that is not a
// dependency (a sign that go list's output changed).
func Check(t testing.TB, forbidden, required []string) {
	t.Helper()
	deps := Deps(t)
	for _, dep := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("depends on %s", dep)
			}
		}
	}
	for _, want := range required {
		if !slices.Contains(deps, want) {
			t.Errorf("does not depend on %s (go list output changed?)", want)
		}
	}
}
