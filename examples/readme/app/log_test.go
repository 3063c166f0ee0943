package main

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// logSink receives the records of a slog.TextHandler, one Write per record.
type logSink struct {
	mu      sync.Mutex
	records []string
	notify  chan struct{}
}

// captureDefault makes slog.Default write text records at level and above to
// the returned sink for the rest of the test.
func captureDefault(t *testing.T, level slog.Level) *logSink {
	t.Helper()
	s := &logSink{notify: make(chan struct{}, 1)}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: level})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return s
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.records = append(s.records, string(p))
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// waitFor returns the first record that contains every one of parts,
// waiting for it up to timeout.
func (s *logSink) waitFor(t *testing.T, timeout time.Duration, parts ...string) string {
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
