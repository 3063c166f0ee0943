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
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestWritersNotifyOnlyWhileARelayWaits: on PostgreSQL a transaction that
// writes outbox rows sends a NOTIFY only between a relay's RequestWake and
// its next claim that returns messages (or its release). Each write comes
// from a connection of its own, through a new Writer (which reads the
// wake-up register at its first write), and PostgreSQL delivers
// notifications in commit order with the sender's process id, so the first
// notification after a write that must notify tells whether an earlier
// write notified too. It runs on a plain and on a partitioned outbox table.
func TestWritersNotifyOnlyWhileARelayWaits(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) { writersNotifyOnlyWhileARelayWaits(t, migrated(t, sqlstore.Postgres)) })
	t.Run("partitioned", func(t *testing.T) { writersNotifyOnlyWhileARelayWaits(t, partitioned(t)) })
}

func writersNotifyOnlyWhileARelayWaits(t *testing.T, db *sql.DB) {
	ctx := context.Background()
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// The listener: LISTEN on a connection of its own.
	lc, listener := listenOn(t, db)
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
			w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, databasesql.Executor(c), writeRows(agg)); err != nil {
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
	t.Parallel()
	for _, d := range []sqlstore.Dialect{sqlstore.SQLite, sqlstore.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
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

// TestWritersNotifyWhateverTheirSearchPath: a writer finds the wake-up
// register through the table name it was given, so a writer that names the
// outbox table with its schema from a session whose search_path does not
// include it still commits, and notifies while a relay waits.
func TestWritersNotifyWhateverTheirSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	newWriter := func() *sqlstore.Writer {
		w, err := sqlstore.NewWriter(sqlstore.Postgres, schema+"."+sqlstore.DefaultTable, sqlstore.WriterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return w
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
	if _, err := newWriter().Write(ctx, databasesql.Executor(c), writeRows("a")); err != nil {
		t.Fatalf("write with another search_path, no relay waiting: %v", err)
	}
	if _, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	var pid uint32
	if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	notified := listenFor(t, db, pid, func() {
		if _, err := newWriter().Write(ctx, databasesql.Executor(c), writeRows("b")); err != nil {
			t.Fatalf("write with another search_path while a relay waits: %v", err)
		}
	})
	if !notified {
		t.Fatal("a write while a relay waits sent no notification")
	}
}

// listenOn returns a connection of its own listening on the default
// table's channel, closed when the test ends, and its pgx connection.
func listenOn(t *testing.T, db *sql.DB) (*sql.Conn, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	lc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	var listener *pgx.Conn
	if err := lc.Raw(func(dc any) error {
		listener = dc.(*stdlib.Conn).Conn()
		_, err := listener.Exec(ctx, `LISTEN "`+sqlstore.DefaultTable+`"`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return lc, listener
}

// listenFor listens on the default table's channel while write runs, and
// reports whether a notification from the session of process id sender
// arrived: it sends one of its own afterwards, which PostgreSQL delivers
// after any sent by transactions that committed before. (Channels are per
// database: other tests' writers notify on it too.)
func listenFor(t *testing.T, db *sql.DB, sender uint32, write func()) bool {
	t.Helper()
	ctx := context.Background()
	lc, listener := listenOn(t, db)
	write()
	if _, err := db.ExecContext(ctx, `SELECT pg_notify($1, 'sentinel')`, sqlstore.DefaultTable); err != nil {
		t.Fatal(err)
	}
	var mine int
	err := lc.Raw(func(any) error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			note, err := listener.WaitForNotification(wctx)
			if err != nil {
				return err
			}
			if note.Payload == "sentinel" {
				return nil
			}
			if note.PID == sender {
				mine++
			}
		}
	})
	if err != nil {
		t.Fatalf("waiting for the sentinel notification: %v", err)
	}
	return mine > 0
}

// TestListenWakesTheRelayAfterARequest: writers read the wake-up register
// at most every 100 ms, so one that read it just before a relay asked to be
// woken writes without notifying; Listen therefore calls its function once
// more shortly after each RequestWake, and the relay's claim then finds
// that writer's rows. The table has a name of its own, so that no other
// test's writer notifies on its channel.
func TestListenWakesTheRelayAfterARequest(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := openSQL(t, sqlstore.Postgres)
	const table = "settle_outbox"
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true, OutboxTable: table}); err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, table, sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- store.Listen(ctx, func() { woken <- struct{}{} }) }()
	select {
	case <-woken: // listening
	case err := <-done:
		t.Fatalf("Listen() = %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen never called its function")
	}
	if _, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	staleWake(w) // read the register just before the request
	if _, err := w.Write(ctx, databasesql.Executor(db), writeRows("a")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case err := <-done:
		t.Fatalf("Listen() = %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after RequestWake: the row of a writer that had not read the request waits for the next poll")
	}
	b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10})
	if err != nil || len(b.Messages) != 1 {
		t.Fatalf("Claim() after the wake-up = %d messages, %v; want the row", len(b.Messages), err)
	}
}

// TestMigrateDropsTheNotifyTrigger: tables of earlier versions had a
// statement trigger that read the wake-up register on every insert;
// migrating removes it and its function, so their writers stop paying for
// it, and writes still succeed.
func TestMigrateDropsTheNotifyTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	for _, q := range []string{
		`CREATE FUNCTION outbox_messages_notify() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('outbox_messages', ''); RETURN NULL; END $$`,
		`CREATE TRIGGER outbox_messages_notify AFTER INSERT ON outbox_messages FOR EACH STATEMENT EXECUTE FUNCTION outbox_messages_notify()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	var triggers, functions int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'outbox_messages'::regclass AND NOT tgisinternal AND tgname NOT IN ('outbox_messages_enqueue', 'outbox_messages_truncate')),
		(SELECT count(*) FROM pg_proc WHERE proname = 'outbox_messages_notify' AND pronamespace = current_schema()::regnamespace)`).Scan(&triggers, &functions); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 || functions != 0 {
		t.Fatalf("after migrating: %d triggers on the outbox table, %d notify functions; want none", triggers, functions)
	}
	writeEvents(t, db, sqlstore.Postgres, "a")
}

// TestWriterWithoutThePrivilegeStillCommits: a writer whose role may not
// read the wake-up register never notifies, and its transaction commits
// (a failed read would abort it); the relay finds its rows by polling.
func TestWriterWithoutThePrivilegeStillCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migrated(t, sqlstore.Postgres)
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	const role = "outbox_test_writer"
	for _, q := range []string{
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '` + role + `') THEN CREATE ROLE ` + role + `; END IF; END $$`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT ON outbox_messages TO ` + role,
		`GRANT USAGE ON SEQUENCE outbox_messages_id_seq TO ` + role,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.Exec(`DROP OWNED BY ` + role) })
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := store.RequestWake(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE `+role); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, databasesql.Executor(tx), writeRows("a")); err != nil {
		t.Fatalf("write by a role without SELECT on the wake-up register: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10})
	if err != nil || len(b.Messages) != 1 {
		t.Fatalf("Claim() = %d messages, %v; want the row", len(b.Messages), err)
	}
}
