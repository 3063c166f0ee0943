package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHelpExitsZero runs the program's main with -h in a child process (this
// test binary, re-executed): it prints the usage and exits with status 0.
func TestHelpExitsZero(t *testing.T) {
	if os.Getenv("GOOUTBOX_EXAMPLE_HELP") == "1" {
		os.Args = []string{"relay", "-h"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelpExitsZero$")
	cmd.Env = append(os.Environ(), "GOOUTBOX_EXAMPLE_HELP=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("relay -h: %v, want exit status 0; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "-database-url") || strings.Contains(string(out), "help requested") {
		t.Errorf("relay -h printed no usage, or an error:\n%s", out)
	}
}
