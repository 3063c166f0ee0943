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
	const env = "GOOUTBOX_RELAYBENCH_HELP"
	if os.Getenv(env) == "1" {
		os.Args = []string{"relaybench", "-h"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelpExitsZero$")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("relaybench -h: %v, want exit status 0; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "-database-url") || strings.Contains(string(out), "help requested") {
		t.Errorf("relaybench -h printed no usage naming -database-url, or an error:\n%s", out)
	}
}
