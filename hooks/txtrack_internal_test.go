package hooks

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// fakeTx is a gorm.Tx whose statements all succeed.
type fakeTx struct{ gorm.Tx }

func (fakeTx) ExecContext(context.Context, string, ...any) (sql.Result, error) { return nil, nil }
func (fakeTx) Commit() error                                                   { return nil }
func (fakeTx) Rollback() error                                                 { return nil }

type evt struct{}

func (evt) EventKey() runtime.Key { return runtime.Key{Type: "t.e", Version: 1} }
func (evt) Validate() error       { return nil }
func (evt) EventTime() time.Time  { return time.Time{} }

// TestSavepointBookkeeping follows savepoint statements as the databases
// define them: ROLLBACK TO keeps the savepoint and destroys later ones,
// RELEASE destroys it and later ones, a repeated name refers to the latest,
// unquoted names compare case-insensitively.
func TestSavepointBookkeeping(t *testing.T) {
	t.Parallel()
	p := &Plugin{}
	var rec runtime.Recorder
	for range 6 {
		rec.Record(evt{})
	}
	st := rec.OutboxRecorder()
	ids := make([]uuid.UUID, 0, 6)
	for _, r := range st.Pending() {
		ids = append(ids, r.ID)
	}
	tx := &trackedTx{Tx: fakeTx{}, p: p}
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	tx.noteWrite(st, ids[0], true)
	exec("SAVEPOINT a")
	tx.noteWrite(st, ids[1], true)
	exec("savepoint B;")
	tx.noteWrite(st, ids[2], true)
	exec("ROLLBACK TO b") // undoes ids[2], keeps B
	tx.noteWrite(st, ids[3], true)
	exec("SAVEPOINT a") // a second "a"
	tx.noteWrite(st, ids[4], true)
	exec("  rollback to savepoint A") // the latest "a": undoes ids[4]
	exec(`RELEASE SAVEPOINT "b"`)     // quoted: names b, releases B and the later a
	exec("ROLLBACK TO SAVEPOINT a")   // the first "a": undoes ids[1], ids[3]
	tx.noteWrite(st, ids[5], true)
	if tx.unsure {
		t.Fatal("transaction unsure after statements it can follow")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var left []uuid.UUID
	for _, r := range st.Pending() {
		left = append(left, r.ID)
	}
	want := []uuid.UUID{ids[1], ids[2], ids[3], ids[4]}
	if len(left) != len(want) {
		t.Fatalf("pending after commit = %v, want %v", left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Fatalf("pending after commit = %v, want %v", left, want)
		}
	}

	// What it cannot follow makes it confirm nothing.
	for _, q := range []string{"ROLLBACK TO SAVEPOINT never_taken", "COMMIT", "SAVEPOINT"} {
		tx := &trackedTx{Tx: fakeTx{}, p: p}
		tx.noteWrite(st, ids[1], true)
		exec := func(q string) { _, _ = tx.ExecContext(ctx, q) }
		exec(q)
		if !tx.unsure {
			t.Errorf("%q: not unsure", q)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if st.Len() != 4 {
			t.Errorf("%q: an event was confirmed", q)
		}
	}
	for q, want := range map[string]string{
		"SELECT 1": "", "  savepoint x": "SAVEPOINT", "ROLLBACK": "ROLLBACK", "end;": "END",
		"RELEASED": "", "Abort": "ABORT", "": "", "INSERT INTO x": "",
	} {
		if got := txControl(q); got != want {
			t.Errorf("txControl(%q) = %q, want %q", q, got, want)
		}
	}
}
