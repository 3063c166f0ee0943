package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/hooks/hookstest"
)

// TestRelaybenchRuns runs the benchmark program with tiny numbers, so it
// keeps working; the figures themselves are not checked.
func TestRelaybenchRuns(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-database-url", hookstest.PostgresDSN(t), "-events", "300", "-naive-events", "50",
		"-rate", "200", "-duration", "250ms", "-aggregates", "20"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"gooutbox relay", "naive relay", "ratio gooutbox / naive", "latency commit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRelaybenchLargeEvents runs the large-event mode with tiny numbers: 30
// events of 100 kB, with a MaxBatchBytes that makes several claims.
func TestRelaybenchLargeEvents(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-database-url", hookstest.PostgresDSN(t), "-big-events", "30", "-big-bytes", "100000",
		"-max-batch-bytes", "400000", "-aggregates", "7"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"drain 30 large events", "MaxBatchBytes 400000", "RSS during the drain: start"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
