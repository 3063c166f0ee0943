package main

import (
	"testing"

	"github.com/gooutbox/outbox/examples/internal/exampletest"
)

// TestHelpExitsZero runs the program's main with -h in a child process (this
// test binary, re-executed): it prints the usage and exits with status 0.
func TestHelpExitsZero(t *testing.T) {
	exampletest.HelpExitsZero(t, "TestHelpExitsZero", "monitor", main, "-listen")
}
