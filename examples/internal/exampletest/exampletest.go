// Package exampletest holds what the example programs' tests share: running
// a program's main with -h in a child process, and capturing slog.Default.
package exampletest

import (
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// envHelp tells the re-executed test binary to run main with -h.
const envHelp = "GOOUTBOX_EXAMPLE_HELP"

// HelpExitsZero checks that the program (name, its main function) prints its
// usage, mentioning wantFlag, and exits with status 0 when run with -h. It
// re-executes the test binary running only the calling test, which then
// calls main with -h instead of checking; call it from a test named
// testName.
func HelpExitsZero(t *testing.T, testName, name string, main func(), wantFlag string) {
	t.Helper()
	if os.Getenv(envHelp) == "1" {
		os.Args = []string{name, "-h"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$")
	cmd.Env = append(os.Environ(), envHelp+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -h: %v, want exit status 0; output:\n%s", name, err, out)
	}
	if !strings.Contains(string(out), wantFlag) || strings.Contains(string(out), "help requested") {
		t.Errorf("%s -h printed no usage naming %s, or an error:\n%s", name, wantFlag, out)
	}
}

// LogSink receives the records of a slog.TextHandler, one Write per record.
type LogSink struct {
	mu      sync.Mutex
	records []string
	notify  chan struct{}
}

// CaptureDefault makes slog.Default write text records at level and above
// to the returned sink for the rest of the test. Tests that use it must not
// run in parallel.
func CaptureDefault(t *testing.T, level slog.Level) *LogSink {
	t.Helper()
	s := &LogSink{notify: make(chan struct{}, 1)}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: level})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return s
}

// Write records one log record.
func (s *LogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.records = append(s.records, string(p))
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// WaitFor returns the first record that contains every one of parts,
// waiting for it up to timeout; it fails t when none comes.
func (s *LogSink) WaitFor(t *testing.T, timeout time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		for _, r := range s.records {
			if containsAll(r, parts) {
				s.mu.Unlock()
				return r
			}
		}
		all := strings.Join(s.records, "")
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-deadline.C:
			t.Fatalf("no log record with %q within %v; got:\n%s", parts, timeout, all)
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
