package sqlstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// TestLogicalMessageRoundTrip: what EncodeLogicalMessage writes,
// DecodeLogicalMessage reads back, but the id and attempts, which the
// reader numbers; content that is no such message is an error.
func TestLogicalMessageRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 6, 8, 0, 0, 123456000, time.UTC)
	in := sqlstore.RowValues{ID: 7, Attempts: 2, EventID: "01900000-0000-7000-8000-000000000001", EventType: "orders.order_placed", EventVersion: 2,
		AggregateType: "order", AggregateID: "42", Topic: "orders", Payload: []byte(`{"total":"1.50"}`),
		Headers: `{"correlation_id":"c-1"}`, OccurredAt: at, CreatedAt: at.Add(time.Second)}
	b, err := sqlstore.EncodeLogicalMessage(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sqlstore.DecodeLogicalMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.ID, want.Attempts = 0, 0
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`not json`, `{}`, `{"event_id":"x"}`} {
		if _, err := sqlstore.DecodeLogicalMessage([]byte(bad)); err == nil {
			t.Errorf("DecodeLogicalMessage(%s) succeeded", bad)
		}
	}
}

// TestLogicalMessagesNeedPostgres: a writer of logical decoding messages
// exists only for PostgreSQL.
func TestLogicalMessagesNeedPostgres(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.MySQL, sqlstore.SQLite} {
		if _, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{LogicalMessages: "gooutbox"}); !errors.Is(err, sqlstore.ErrUnsupportedDialect) {
			t.Errorf("NewWriter(%s, LogicalMessages) = %v, want ErrUnsupportedDialect", d, err)
		}
	}
	if _, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{LogicalMessages: "gooutbox"}); err != nil {
		t.Errorf("NewWriter(postgres, LogicalMessages): %v", err)
	}
}
