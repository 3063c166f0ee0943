package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// deadLetter writes the dead letter a consumer named name writes when it
// gives up on a message of topic (what consumer.Consumer publishes to a
// DeadLetterTable), and returns the message's UUID.
func (d testDB) deadLetter(t *testing.T, name, topic, typ, cause string) string {
	t.Helper()
	dlq, err := consumer.NewDeadLetterTable(databasesql.New(d.db), "")
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewMessage(runtime.NewEventID().String(), []byte(`{"order_id":"o-1"}`))
	m.Metadata.Set(runtime.MetadataEventType, typ)
	m.Metadata.Set(runtime.MetadataAggregateID, "o-1")
	m.Metadata.Set(consumer.MetadataDeadLetterReason, string(consumer.ReasonHandler))
	m.Metadata.Set(consumer.MetadataDeadLetterError, cause)
	m.Metadata.Set(consumer.MetadataDeadLetterTopic, topic)
	m.Metadata.Set(consumer.MetadataDeadLetterConsumer, name)
	m.Metadata.Set(consumer.MetadataDeadLetterAttempts, "4")
	m.Metadata.Set(consumer.MetadataDeadLetterAt, time.Now().UTC().Format(time.RFC3339Nano))
	if err := dlq.Publish(name+".dlq", m); err != nil {
		t.Fatal(err)
	}
	return m.UUID
}

// TestDeadLetters: the operator path of a consumer's dead letters, on
// every dialect: list (filtered, paged, as JSON), show, counts, re-drive
// to the topic each came from (or --to), through --broker, and discard;
// an id that is no row fails with exit 1, the others still done.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	forEachDatabase(t, func(t *testing.T, d testDB) {
		if code, _, stderr := runCmd(t, nil, "migrate", "--dead-letters", "--db", d.url); code != 0 {
			t.Fatalf("migrate --dead-letters: exit %d: %s", code, stderr)
		}
		billing := d.deadLetter(t, "billing", "payments", "payments.made", "ledger refuses currency XYZ")
		notifier := d.deadLetter(t, "notifier", "orders", "orders.placed", "mail server down")
		notifier2 := d.deadLetter(t, "notifier", "orders", "orders.placed", "mail server down again")

		code, out, stderr := runCmd(t, nil, "deadletters", "list", "--db", d.url)
		if code != 0 {
			t.Fatalf("list: exit %d: %s", code, stderr)
		}
		for _, want := range []string{"billing", "notifier", "payments", "payments.made", "handler", "ledger refuses currency XYZ"} {
			if !strings.Contains(out, want) {
				t.Errorf("list does not show %q:\n%s", want, out)
			}
		}
		list := func(args ...string) []deadLetterJSON {
			t.Helper()
			code, out, stderr := runCmd(t, nil, append([]string{"deadletters", "list", "--json", "--db", d.url}, args...)...)
			if code != 0 {
				t.Fatalf("list %v: exit %d: %s", args, code, stderr)
			}
			var rows []deadLetterJSON
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				t.Fatalf("list --json: %v:\n%s", err, out)
			}
			return rows
		}
		rows := list("--consumer", "notifier")
		if len(rows) != 2 || rows[0].MessageUUID != notifier || rows[1].MessageUUID != notifier2 || rows[0].Attempts != 4 || rows[0].Topic != "orders" {
			t.Fatalf("list --consumer notifier = %+v", rows)
		}
		if page := list("--limit", "1", "--after", strconv.FormatInt(rows[0].ID, 10), "--consumer", "notifier"); len(page) != 1 || page[0].ID != rows[1].ID {
			t.Errorf("second page = %+v", page)
		}
		var billingID int64
		for _, r := range list() {
			if r.MessageUUID == billing {
				billingID = r.ID
			}
		}

		code, out, stderr = runCmd(t, nil, "deadletters", "show", strconv.FormatInt(billingID, 10), "--db", d.url)
		if code != 0 {
			t.Fatalf("show: exit %d: %s", code, stderr)
		}
		for _, want := range []string{billing, "ledger refuses currency XYZ", "event_type: payments.made", `{"order_id":"o-1"}`} {
			if !strings.Contains(out, want) {
				t.Errorf("show does not show %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, consumer.MetadataDeadLetterReason) {
			t.Errorf("show lists the dead-letter keys as metadata:\n%s", out)
		}
		if code, _, stderr := runCmd(t, nil, "deadletters", "show", "999999", "--db", d.url); code != exitError || !strings.Contains(stderr, "no dead letter 999999") {
			t.Errorf("show of an unknown id: exit %d: %s", code, stderr)
		}

		// Re-drive one to where it came from, the others elsewhere.
		pub := newRecorder()
		code, out, stderr = runCmd(t, pub, "deadletters", "redrive", strconv.FormatInt(billingID, 10), "--broker", "kafka://127.0.0.1:9092", "--db", d.url)
		if code != 0 || !strings.Contains(out, "re-drove "+strconv.FormatInt(billingID, 10)) {
			t.Fatalf("redrive: exit %d: %s%s", code, out, stderr)
		}
		got := pub.byTopic["payments"]
		if len(got) != 1 || got[0].UUID != billing || got[0].Metadata.Get(runtime.MetadataEventType) != "payments.made" ||
			got[0].Metadata.Get(consumer.MetadataDeadLetterReason) != "handler" || got[0].Metadata.Get(consumer.MetadataDeadLetterAt) == "" ||
			string(got[0].Payload) != `{"order_id":"o-1"}` {
			t.Fatalf("re-driven to payments: %v", got)
		}
		if rows := list(); len(rows) != 2 {
			t.Errorf("waiting after the re-drive = %+v, want the two of notifier", rows)
		}
		if rows := list("--redriven", "--consumer", "billing"); len(rows) != 1 || rows[0].RedrivenAt == nil {
			t.Errorf("list --redriven = %+v: want billing's, re-driven", rows)
		}
		code, out, _ = runCmd(t, nil, "deadletters", "counts", "--json", "--db", d.url)
		var counts []struct {
			Consumer          string
			Waiting, Redriven int64
		}
		if err := json.Unmarshal([]byte(out), &counts); code != 0 || err != nil || len(counts) != 2 ||
			counts[0].Consumer != "billing" || counts[0].Waiting != 0 || counts[0].Redriven != 1 ||
			counts[1].Consumer != "notifier" || counts[1].Waiting != 2 {
			t.Errorf("counts: exit %d, %v: %s", code, err, out)
		}

		code, out, stderr = runCmd(t, pub, "deadletters", "redrive", "--all", "--consumer", "notifier", "--to", "orders.retry", "--broker", "kafka://127.0.0.1:9092", "--db", d.url)
		if code != 0 || !strings.Contains(out, "re-drove 2 of 2") {
			t.Fatalf("redrive --all: exit %d: %s%s", code, out, stderr)
		}
		if got := pub.byTopic["orders.retry"]; len(got) != 2 || got[0].UUID != notifier || got[1].UUID != notifier2 {
			t.Errorf("re-driven to orders.retry, in order: %v", got)
		}
		code, _, stderr = runCmd(t, pub, "deadletters", "redrive", "999999", "--broker", "kafka://127.0.0.1:9092", "--db", d.url)
		if code != exitError || !strings.Contains(stderr, "no dead letter 999999") {
			t.Errorf("redrive of an unknown id: exit %d: %s", code, stderr)
		}

		code, out, stderr = runCmd(t, nil, "deadletters", "discard", strconv.FormatInt(billingID, 10), "999999", "--db", d.url)
		if code != exitError || !strings.Contains(out, "discarded 1 of 2") {
			t.Errorf("discard of a row and an unknown id: exit %d: %s%s", code, out, stderr)
		}
		if rows := list("--redriven", "--consumer", "billing"); len(rows) != 0 {
			t.Errorf("billing's row after discard: %+v", rows)
		}
	})
}

// TestDeadLettersUsage: the command's usage errors (exit 2) name what is
// missing or wrong, before anything is opened.
func TestDeadLettersUsage(t *testing.T) {
	t.Parallel()
	d := sqliteDB(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"deadletters"}, "needs a subcommand"},
		{[]string{"deadletters", "resend"}, `unknown deadletters subcommand "resend"`},
		{[]string{"deadletters", "redrive", "1"}, "needs --broker URL"},
		{[]string{"deadletters", "redrive", "--broker", "kafka://127.0.0.1:9092"}, "needs row ids"},
		{[]string{"deadletters", "redrive", "1", "--broker", "memory://"}, "--allow-local-broker"},
		{[]string{"deadletters", "list", "--to", "x"}, "--to and --all are redrive's"},
		{[]string{"deadletters", "show"}, "takes one id"},
		{[]string{"deadletters", "discard", "x1"}, "x1"},
		{[]string{"deadletters", "list", "--limit", "0"}, "--limit 0"},
	} {
		code, _, stderr := runCmd(t, nil, append(tc.args, "--db", d.url)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 saying %q", tc.args, code, stderr, tc.want)
		}
	}
}
