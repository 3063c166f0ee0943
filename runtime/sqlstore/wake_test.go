package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// TestWritersNotifyOnlyWhileARelayWaits: on PostgreSQL a transaction that
// writes outbox rows sends a NOTIFY only between a relay's RequestWake and
// its next claim that returns messages (or its release). Each write comes
// from a connection of its own, and PostgreSQL delivers notifications in
// commit order with the sender's process id, so the first notification
// after a write that must notify tells whether an earlier write notified
// too.
// It runs on a plain and on a partitioned outbox table, whose statement
// trigger is the partitioned table's.
func TestWritersNotifyOnlyWhileARelayWaits(t *testing.T) {
	t.Run("plain", func(t *testing.T) { writersNotifyOnlyWhileARelayWaits(t, migrated(t, sqlstore.Postgres)) })
	t.Run("partitioned", func(t *testing.T) { writersNotifyOnlyWhileARelayWaits(t, partitioned(t)) })
}

func writersNotifyOnlyWhileARelayWaits(t *testing.T, db *sql.DB) {
	ctx := context.Background()
	store, err := sqlstore.NewStore(db, sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}

	// The listener: LISTEN on a connection of its own.
	lc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	var listener *pgx.Conn
	if err := lc.Raw(func(dc any) error {
		listener = dc.(*stdlib.Conn).Conn()
		_, err := listener.Exec(ctx, `LISTEN "`+sqlstore.DefaultTable+`"`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// writer returns a function that writes one event from a connection
	// of its own, and that connection's process id.
	writer := func(agg string) (func(), uint32) {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		var pid uint32
		if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return func() {
			t.Helper()
			if _, err := w.Write(ctx, c, writeRows(agg)); err != nil {
				t.Fatal(err)
			}
		}, pid
	}
	quiet, quietPID := writer("a")
	loud, loudPID := writer("b")

	next := func(what string) uint32 {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var n uint32
		err := lc.Raw(func(any) error {
			for {
				note, err := listener.WaitForNotification(wctx)
				if err != nil {
					return err
				}
				// Channels are per database, not per schema: skip
				// the notifications of other tests' outbox tables.
				if note.PID == quietPID || note.PID == loudPID {
					n = note.PID
					return nil
				}
			}
		})
		if err != nil {
			t.Fatalf("waiting for the notification of %s: %v", what, err)
		}
		return n
	}

	claim := func(want int) {
		t.Helper()
		b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Messages) != want {
			t.Fatalf("claimed %d messages, want %d", len(b.Messages), want)
		}
		if want > 0 {
			if err := store.Mark(ctx, b, relay.Outcome{Published: ids(b)}); err != nil {
				t.Fatal(err)
			}
		}
	}

	claim(0) // registers r1 and gives it the shards
	quiet()  // nobody waits: no NOTIFY
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	loud()
	if pid := next("a write while r1 waits"); pid != loudPID {
		t.Fatalf("first notification from process %d, want %d (the write while r1 waits); %d is the write before the request", pid, loudPID, quietPID)
	}

	claim(2) // finds messages: r1 no longer waits
	quiet()
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	loud()
	if pid := next("the second write while r1 waits"); pid != loudPID {
		t.Fatalf("notification from process %d, want %d: the write after a claim that found messages notified", pid, loudPID)
	}

	// A release ends the request too.
	claim(2)
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	quiet()
	claim(1) // r1 again, not waiting
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	loud()
	if pid := next("the write after the release"); pid != loudPID {
		t.Fatalf("notification from process %d, want %d: a write after the release notified", pid, loudPID)
	}
}

// ids returns the ids of b's messages.
func ids(b relay.Batch) []int64 {
	out := make([]int64, len(b.Messages))
	for i, m := range b.Messages {
		out[i] = m.ID
	}
	return out
}

// TestRequestWakeIsANoOpWithoutNotify: on SQLite and MySQL, whose writers
// notify nothing, RequestWake succeeds and changes nothing a claim sees.
func TestRequestWakeIsANoOpWithoutNotify(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			db := migrated(t, d)
			store, err := sqlstore.NewStore(db, sqlstore.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.RequestWake(context.Background(), "r1"); err != nil {
				t.Fatalf("RequestWake() = %v", err)
			}
			writeEvents(t, db, d, "a")
			b, err := store.Claim(context.Background(), relay.ClaimRequest{Owner: "r1", Limit: 10})
			if err != nil || len(b.Messages) != 1 {
				t.Fatalf("Claim() = %d messages, %v; want 1", len(b.Messages), err)
			}
		})
	}
}

// TestTriggerIgnoresTheWritersSearchPath: the trigger finds its wake-up
// sequence whatever the writer's search_path, so a writer that names the
// outbox table with its schema from a session whose search_path does not
// include it still commits, waiting relay or not.
func TestTriggerIgnoresTheWritersSearchPath(t *testing.T) {
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(db, sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, schema+"."+sqlstore.DefaultTable, sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `SET search_path TO pg_catalog`); err != nil {
		t.Fatal(err)
	}
	defer c.ExecContext(ctx, `RESET search_path`)
	if _, err := w.Write(ctx, c, writeRows("a")); err != nil {
		t.Fatalf("write with another search_path, no relay waiting: %v", err)
	}
	if _, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, c, writeRows("b")); err != nil {
		t.Fatalf("write with another search_path while a relay waits: %v", err)
	}
}
