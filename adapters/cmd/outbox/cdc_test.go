package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// cdcTestDB returns a PostgreSQL test database, skipping (failing in CI)
// unless its wal_level is logical, and a slot name of the test's own.
func cdcTestDB(t *testing.T) (testDB, string) {
	t.Helper()
	d := openTestDB(t, sqlstore.Postgres)
	var level string
	if err := d.db.QueryRowContext(context.Background(), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		runtimetest.Unavailable(t, "PostgreSQL with wal_level = logical (.ci/run sets it)", "127.0.0.1:5432", "OUTBOX_TEST_POSTGRES_DSN", fmt.Errorf("wal_level is %q", level))
	}
	slot := "cmd_test_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	t.Cleanup(func() { runCmd(t, nil, "cdc", "drop", "--db", d.url, "--slot", slot) })
	return d, slot
}

// TestCDCSetupStatusDrop: cdc setup creates the slot and the publication,
// status shows them (exit 0; JSON with --json), drop removes them, and
// status then exits 3 naming the fix.
func TestCDCSetupStatusDrop(t *testing.T) {
	t.Parallel()
	d, slot := cdcTestDB(t)
	if code, stdout, stderr := runCmd(t, nil, "cdc", "setup", "--db", d.url, "--slot", slot); code != exitOK || !strings.Contains(stdout, slot) {
		t.Fatalf("cdc setup: exit %d, %q, %q", code, stdout, stderr)
	}
	code, stdout, stderr := runCmd(t, nil, "cdc", "status", "--db", d.url, "--slot", slot, "--json")
	if code != exitOK {
		t.Fatalf("cdc status: exit %d: %s", code, stderr)
	}
	var st struct {
		Exists, Publication bool
		ConfirmedLSN        string
		WALStatus           string
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("cdc status --json: %v in %q", err, stdout)
	}
	if !st.Exists || !st.Publication || st.ConfirmedLSN == "" || st.WALStatus == "" {
		t.Errorf("cdc status after setup: %+v", st)
	}
	if code, _, stderr := runCmd(t, nil, "cdc", "drop", "--db", d.url, "--slot", slot); code != exitOK {
		t.Fatalf("cdc drop: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCmd(t, nil, "cdc", "status", "--db", d.url, "--slot", slot)
	if code != exitAlert || !strings.Contains(stderr, "outbox cdc setup") {
		t.Errorf("cdc status after drop: exit %d, %q; want %d naming outbox cdc setup", code, stderr, exitAlert)
	}
	if code, _, stderr := runCmd(t, nil, "cdc", "setup", "--db", "sqlite:x.db"); code != exitUsage || !strings.Contains(stderr, "postgres://") {
		t.Errorf("cdc setup on SQLite: exit %d, %q; want a usage error asking for postgres://", code, stderr)
	}
}

// TestDashboardCDCSlot: outbox dashboard --cdc-slot shows the slot on
// the overview: no relay streaming from a slot just set up, the WAL it
// keeps; and says so when the slot is gone.
func TestDashboardCDCSlot(t *testing.T) {
	t.Parallel()
	d, slot := cdcTestDB(t)
	if code, _, stderr := runCmd(t, nil, "cdc", "setup", "--db", d.url, "--slot", slot); code != exitOK {
		t.Fatalf("cdc setup: exit %d: %s", code, stderr)
	}
	base, stop := startDashboard(t, "--db", d.url, "--cdc-slot", slot)
	body := getPage(t, base)
	for _, want := range []string{"CDC slot " + slot, `id="slot-streaming">no relay<`, `id="slot-lag">`, `id="slot-wal-status">reserved<`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview with --cdc-slot lacks %q:\n%s", want, body)
		}
	}
	if code, _, stderr := runCmd(t, nil, "cdc", "drop", "--db", d.url, "--slot", slot); code != exitOK {
		t.Fatalf("cdc drop: exit %d: %s", code, stderr)
	}
	if body := getPage(t, base); !strings.Contains(body, `id="slot-missing"`) {
		t.Errorf("overview after the slot was dropped does not say it is missing:\n%s", body)
	}
	stop()
	if code, _, stderr := runCmd(t, nil, "dashboard", "--db", "sqlite:x.db", "--cdc-slot", slot); code != exitUsage || !strings.Contains(stderr, "postgres://") {
		t.Errorf("dashboard --cdc-slot on SQLite: exit %d, %q; want a usage error asking for postgres://", code, stderr)
	}
}

// TestRelayCDC: outbox relay --cdc table sets the slot up, publishes what
// is committed after, in order per aggregate, and the rows end published.
func TestRelayCDC(t *testing.T) {
	t.Parallel()
	d, slot := cdcTestDB(t)
	if code, _, stderr := runCmd(t, nil, "cdc", "setup", "--db", d.url, "--slot", slot); code != exitOK {
		t.Fatalf("cdc setup: exit %d: %s", code, stderr)
	}
	ids := d.write(t, "a", "b", "a", "a")
	pub := newRecorder()
	runRelay(t, d, pub, func() bool { return len(pub.sequence("a")) == 3 && len(pub.sequence("b")) == 1 }, "--cdc", "table", "--cdc-slot", slot)
	if got, want := pub.sequence("a"), []string{ids[0], ids[2], ids[3]}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("aggregate a published %v, want %v", got, want)
	}
	var pending int
	if err := d.db.QueryRowContext(context.Background(), `SELECT count(*) FROM outbox_messages WHERE published_at IS NULL`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 0 {
		t.Errorf("%d rows without published_at after the CDC relay stopped, want 0", pending)
	}
	if code, _, stderr := runCmd(t, nil, "relay", "--db", d.url, "--broker", "memory://", "--allow-local-broker", "--cdc", "rows"); code != exitUsage || !strings.Contains(stderr, "--cdc") {
		t.Errorf("relay --cdc rows: exit %d, %q; want a usage error naming --cdc", code, stderr)
	}
}
