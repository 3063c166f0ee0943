package runtimetest

import (
	"os"
	"testing"
)

// EnvLong is the environment variable that turns on the long test tiers:
// Watermill's conformance suites at their stress sizes, the adapters'
// stress tests, the outbox conformance suite (package adapters/adaptertest)
// at full size, the correctness suite's core tier and the benchmark
// program's smoke runs. CI sets it (OUTBOX_TEST_LONG=1); without it,
// `go test` runs the same tests at smaller sizes, or skips the ones that
// only have a long form, so that the contributor's loop takes minutes.
const EnvLong = "OUTBOX_TEST_LONG"

// Long reports whether the long test tiers run (see [EnvLong]).
func Long() bool { return os.Getenv(EnvLong) == "1" }

// SkipUnlessLong skips t, saying what it is, unless the long test tiers
// run (see [EnvLong]).
func SkipUnlessLong(t testing.TB, what string) {
	t.Helper()
	if !Long() {
		t.Skipf("%s: a long test tier; set %s=1 to run it (CI does)", what, EnvLong)
	}
}
