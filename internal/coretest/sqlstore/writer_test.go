package sqlstore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestWriterDeduplicatesAndJoinsTransaction: on every database, a Writer on
// a plain *sql.DB (MySQL then begins a transaction of its own for the
// commit-order lock) and on a *sql.Tx writes each event id once, reports
// exactly what it inserted, and its rows roll back with the transaction.
func TestWriterDeduplicatesAndJoinsTransaction(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			first := writeEvents(t, db, d, "1", "2") // outside a transaction
			w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			more := append(first, writeRows("3")...)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			inserted, err := w.Write(ctx, databasesql.Executor(tx), more)
			if err != nil {
				t.Fatal(err)
			}
			if len(inserted) != 1 || !inserted[more[2].Envelope.EventID] {
				t.Errorf("Write of 2 written events and 1 new = %v, want only the new one", inserted)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			st := stats(t, db)
			if st.Pending != 2 {
				t.Errorf("pending after a rolled-back write = %d, want 2", st.Pending)
			}
			inserted, err = w.Write(ctx, databasesql.Executor(db), more)
			if err != nil || len(inserted) != 1 {
				t.Errorf("Write again = %v, %v; want the rolled-back row inserted", inserted, err)
			}
			if st := stats(t, db); st.Pending != 3 {
				t.Errorf("pending = %d, want 3", st.Pending)
			}
		})
	}
}

func stats(t *testing.T, db *sql.DB) relay.Stats {
	t.Helper()
	s, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWriterNewAggregateRowsAreInsertedOnce: rows of a new aggregate are
// written as any other (and on MySQL and SQLite deduplicated as any other),
// but on PostgreSQL, where they skip the deduplication, an event id that
// already has a row fails the write: it is neither skipped silently nor
// written twice, and the table keeps one row per event id.
func TestWriterNewAggregateRowsAreInsertedOnce(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			ctx := context.Background()
			w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			rows := writeRows("1", "2")
			for i := range rows {
				rows[i].NewAggregate = true
			}
			inserted, err := w.Write(ctx, databasesql.Executor(db), rows)
			if err != nil || len(inserted) != 2 {
				t.Fatalf("Write of new aggregates' rows = %v, %v; want both inserted", inserted, err)
			}
			inserted, err = w.Write(ctx, databasesql.Executor(db), rows)
			if d == sqlstore.Postgres {
				if err == nil {
					t.Errorf("Write of new aggregates' rows that have rows = %v, nil; want a unique violation", inserted)
				}
			} else if err != nil || len(inserted) != 0 {
				t.Errorf("Write again = %v, %v; want nothing inserted", inserted, err)
			}
			if st := stats(t, db); st.Pending != 2 {
				t.Errorf("pending = %d, want 2", st.Pending)
			}
		})
	}
}

// TestWriterRefusesAnEventTooLarge: a payload above MaxEventBytes (1 MB by
// default) fails the Write naming the event, and writes none of its rows
// (a new user's trial wrote a 1.1 MB event, which the relay then parked,
// holding its aggregate back); negative means no limit.
func TestWriterRefusesAnEventTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := migrated(t, d)
			rows := writeRows("a", "b")
			rows[1].Envelope.Payload = json.RawMessage(`{"event_version":1,"blob":"` + strings.Repeat("x", sqlstore.DefaultMaxEventBytes) + `"}`)
			w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = w.Write(ctx, databasesql.Executor(db), rows)
			var tl *sqlstore.EventTooLargeError
			if !errors.As(err, &tl) || tl.EventID != rows[1].Envelope.EventID || tl.Limit != sqlstore.DefaultMaxEventBytes || tl.Size != len(rows[1].Envelope.Payload) {
				t.Fatalf("Write of a %d-byte event = %v, want an *EventTooLargeError naming it", len(rows[1].Envelope.Payload), err)
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("rows after the refused Write: %d, %v; want 0", n, err)
			}
			unlimited, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{MaxEventBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := unlimited.Write(ctx, databasesql.Executor(db), rows); err != nil {
				t.Fatalf("Write with MaxEventBytes -1: %v", err)
			}
		})
	}
}

// TestWriterRefusesATopicItsValidatorRefuses: with ValidateTopic set, a row
// whose topic it refuses fails the Write with a *TopicError naming the event
// and the topic, and nothing of the Write is written.
func TestWriterRefusesATopicItsValidatorRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noSpaces := func(topic string) error {
		if strings.Contains(topic, " ") {
			return errors.New("no spaces")
		}
		return nil
	}
	db := migrated(t, sqlstore.SQLite)
	rows := writeRows("a", "b")
	rows[1].Topic = "loan events"
	w, err := sqlstore.NewWriter(sqlstore.SQLite, "", sqlstore.WriterConfig{ValidateTopic: noSpaces})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Write(ctx, databasesql.Executor(db), rows)
	var te *sqlstore.TopicError
	if !errors.As(err, &te) || te.Topic != "loan events" || te.EventID != rows[1].Envelope.EventID || te.Err.Error() != "no spaces" {
		t.Fatalf("Write = %v, want a *TopicError for %q naming event %s", err, "loan events", rows[1].Envelope.EventID)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after the refused Write: %d, %v; want 0", n, err)
	}
	rows[1].Topic = "loan_events"
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		t.Fatalf("Write with valid topics: %v", err)
	}
}
