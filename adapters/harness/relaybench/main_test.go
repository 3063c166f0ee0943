package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestRelaybenchRuns runs every section of the comparison with tiny numbers
// and checks that the output has every table and row: the program keeps
// working end to end (including its checks that every path published every
// event). The figures themselves are not checked.
func TestRelaybenchRuns(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "a smoke run of the benchmark program")
	var out bytes.Buffer
	args := []string{"-database-url", hookstest.PostgresDSN(t), "-events", "300", "-naive-events", "100",
		"-aggregates", "20", "-relays", "1,2", "-reps", "2", "-rate", "200", "-duration", "250ms",
		"-consumer-events", "50", "-idle", "100ms"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	if localURL(args[1]) && !strings.Contains(got, "| server CPU, ms per 1,000 events, median |") {
		t.Errorf("output lacks the server CPU table of a local PostgreSQL:\n%s", got)
	}
	for _, want := range []string{
		"command: go run ./adapters/harness/relaybench -database-url ",
		"| " + sharingLabel(2) + " | ", "| ours(2), sharing / ours(1) | ", "| process CPU, ms per 1,000 events, median |",
		"### 1. Relay", "| ours, 1 relay | ", "| ours, 2 relays | ", "| naive loop", "| Watermill forwarder, defaults (poll 1s) | ",
		"| Watermill forwarder, poll 10ms | ", "| " + batchedLabel + " | ", "| " + batched2Label + " | ", "| " + batchedDeleteLabel + " | ", "| batched(2) / batched(1): ",
		"| ours(1) / batched | ", "| ours(2) / ours(1) | ", "| ours(1) / Watermill forwarder, defaults | ", "| ours(1) / batched DELETE | ", "| " + oursDeleteLabel + " | ", "| ours, 1 relay, DeletePublished / batched DELETE | ",
		"### 2. Latency", "| ours, defaults | ", "| batched relay, poll 10ms | ",
		"### 3. Save", "| " + saveHooks + " | ", "| " + saveByHand + " | ", "| " + saveNoWake + " | ", "| " + saveRelay + " | ", "| " + saveRelayNoWake + " | ", "| plugin / by hand | ", "| with a relay running: plugin / plugin with the register dropped", "NOTIFYs the writers sent while our relay ran",
		"### 4. Consumer", "| " + consumeInbox + " | ", "| " + consumeNoInbox + " | ", "| router: with / without the inbox | ",
		"| " + consumeSerialInbox + " | ", "| " + consumeSerialNoInbox + " | ", "| router, SerialPartitions: with / without the inbox | ", "| router with the inbox: defaults / SerialPartitions | ",
		"| " + consumeRunInbox + " | ", "| " + consumeRunNoInbox + " | ", "| Run: with / without the inbox | ", "| Run with the inbox / router with the inbox | ",
		"### 5. Idle", "| " + idleBroker + " | ", "| " + idleRelay + " | ", "| " + idleDiff + " | ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// Two repetitions: every row of the relay table lists two values.
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "| ours, 1 relay | ") {
			cells := strings.Split(line, "|")
			if reps := strings.Split(strings.TrimSpace(cells[4]), ", "); len(reps) != 2 {
				t.Errorf("row %q has %d repetitions, want 2", line, len(reps))
			}
		}
	}
}

// TestRelaybenchOnly runs one section alone: the others print nothing.
func TestRelaybenchOnly(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-database-url", hookstest.PostgresDSN(t), "-only", "save", "-reps", "1", "-duration", "100ms", "-producers", "2"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "### 3. Save") {
		t.Errorf("output lacks the save section:\n%s", got)
	}
	for _, unwanted := range []string{"### 1.", "### 2.", "### 4.", "### 5."} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q with -only save:\n%s", unwanted, got)
		}
	}
}

// TestRelaybenchRejectsFlags checks the flags that are validated.
func TestRelaybenchRejectsFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-only", "relay,nothing"},
		{"-relays", "1,0"},
		{"-events", "0"},
		{"-payload", "10"},
	} {
		if err := run(context.Background(), append(args, "-database-url", "postgres://127.0.0.1:1/none"), &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}

// TestRelaybenchBrokerMode drains through a broker URL, the memory broker.
func TestRelaybenchBrokerMode(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "a smoke run of the benchmark program")
	var out bytes.Buffer
	args := []string{"-database-url", hookstest.PostgresDSN(t), "-broker-urls", "memory://", "-events", "200", "-reps", "1", "-aggregates", "10"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "relay drain of 200 pre-filled events") {
		t.Errorf("output lacks the broker table:\n%s", out.String())
	}
}

// TestRelaybenchLargeEvents runs the large-event mode with tiny numbers: 30
// events of 100 kB, with a MaxBatchBytes that makes several claims.
func TestRelaybenchLargeEvents(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "a smoke run of the benchmark program")
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

// TestRelaybenchRetentionMode runs the retention comparison with tiny
// numbers: both layouts' rows are printed, and the partitioned table's pass
// dropped the 3 oldest days' partitions.
func TestRelaybenchRetentionMode(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "a smoke run of the benchmark program")
	var out bytes.Buffer
	args := []string{"-database-url", hookstest.PostgresDSN(t), "-retention-compare", "3000", "-retention-pending", "300", "-aggregates", "10"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"| plain table, delete-based retention |", "| partitioned by day, partition drop |", "| 3 partitions dropped, "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRelaybenchMySQLMode runs the MySQL/MariaDB mode with tiny numbers:
// one relay and two sharing drain the outbox, and the ratio is printed.
func TestRelaybenchMySQLMode(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "a smoke run of the benchmark program")
	var out bytes.Buffer
	args := []string{"-mysql-url", runtimetest.MySQLDSN(t), "-events", "300", "-relays", "2", "-reps", "1", "-aggregates", "10"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"| ours, 1 relay |", "| ours, 2 relays, all sharing", "| ours(2), sharing / ours(1) |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
