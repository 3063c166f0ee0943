package sqlstore_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// streamStore is the relay.Store of a change-data-capture relay, as a test
// writes it: rows arrive on a channel as a logical-replication stream
// delivers them (column values, no claim query), are decoded with the
// storage layer's codec, and each Mark is handed back to the test.
type streamStore struct {
	rows  chan sqlstore.RowValues
	marks chan relay.Outcome
}

func (s *streamStore) Claim(_ context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	var b relay.Batch
	for len(b.Messages) < req.Limit {
		select {
		case r := <-s.rows:
			m, err := sqlstore.DecodeRow(r)
			if err != nil {
				return relay.Batch{}, err
			}
			b.Messages = append(b.Messages, m)
		default:
			return b, nil
		}
	}
	return b, nil
}

func (s *streamStore) Mark(_ context.Context, _ relay.Batch, o relay.Outcome) error {
	s.marks <- o
	return nil
}

// brokerOf records what a broker accepted, per aggregate, and refuses (for
// good) every call that carries the poison event.
type brokerOf struct {
	poison string
	mu     sync.Mutex
	got    map[string][]string // aggregate id → event ids, in publish order
	tenant []string            // the x-tenant metadata of every accepted message
}

func (b *brokerOf) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.UUID == b.poison {
			return runtime.Permanent(errors.New("message too large"))
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		agg := m.Metadata.Get(runtime.MetadataAggregateID)
		b.got[agg] = append(b.got[agg], m.UUID)
		b.tenant = append(b.tenant, m.Metadata.Get("x-tenant"))
	}
	return nil
}

func (b *brokerOf) Close() error { return nil }

// TestStreamedRowsThroughRelay is the seam a CDC relay uses: rows that did
// not come from a claim query, decoded with DecodeRow, are published by the
// real relay with its policy (per-topic batches, a poison message failing
// only its own aggregate, and the aggregate's later message held back
// behind it), and the store's Mark learns exactly that.
func TestStreamedRowsThroughRelay(t *testing.T) {
	t.Parallel()
	occurred := time.Date(2026, 11, 30, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = runtime.NewEventID().String()
	}
	// id, aggregate: 10 a, 11 b, 12 a (poison), 13 b, 14 a
	aggs := []string{"a", "b", "a", "b", "a"}
	store := &streamStore{rows: make(chan sqlstore.RowValues, len(ids)), marks: make(chan relay.Outcome, 16)}
	for i, id := range ids {
		headers := `{"x-tenant":"acme"}`
		if i%2 == 1 {
			headers = "" // a NULL column
		}
		store.rows <- sqlstore.RowValues{
			ID: int64(10 + i), EventID: id, EventType: "orders.placed", EventVersion: 1,
			AggregateType: "order", AggregateID: aggs[i], Topic: "orders",
			Payload: []byte(`{"n":1}`), Headers: headers, OccurredAt: occurred, CreatedAt: occurred,
		}
	}
	broker := &brokerOf{poison: ids[2], got: map[string][]string{}}
	r, err := relay.New(store, broker, relay.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()

	var o relay.Outcome
	select {
	case o = <-store.marks:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay never marked the streamed rows")
	}
	published := slices.Clone(o.Published)
	slices.Sort(published)
	if want := []int64{10, 11, 13}; !slices.Equal(published, want) {
		t.Errorf("Mark: published %v, want %v", published, want)
	}
	if len(o.Failed) != 2 || o.Failed[0].ID != 12 || !o.Failed[0].Permanent || o.Failed[1].ID != 14 || o.Failed[1].Permanent {
		t.Errorf("Mark: failed %+v, want 12 (permanent: the poison) then 14 (held back behind it)", o.Failed)
	}
	broker.mu.Lock()
	defer broker.mu.Unlock()
	if want := []string{ids[0]}; !slices.Equal(broker.got["a"], want) {
		t.Errorf("aggregate a on the broker: %v, want %v", broker.got["a"], want)
	}
	if want := []string{ids[1], ids[3]}; !slices.Equal(broker.got["b"], want) {
		t.Errorf("aggregate b on the broker, in order: %v, want %v", broker.got["b"], want)
	}
	if n := strings.Count(strings.Join(broker.tenant, ","), "acme"); n != 1 {
		t.Errorf("x-tenant metadata %q: want acme once (row 10; rows 11 and 13 have no headers)", broker.tenant)
	}
}

// TestDecodeRow: what a change stream hands over becomes the relay's
// message, times in UTC, NULL headers none; a malformed row is an error
// naming it.
func TestDecodeRow(t *testing.T) {
	t.Parallel()
	id := runtime.NewEventID()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("X", -7200))
	m, err := sqlstore.DecodeRow(sqlstore.RowValues{
		ID: 7, EventID: id.String(), EventType: "t.e", EventVersion: 3, AggregateType: "t", AggregateID: "1",
		Topic: "tp", Payload: []byte(`{}`), Headers: `{"k":"v"}`, OccurredAt: at, CreatedAt: at, Attempts: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != 7 || m.EventID != id || m.EventVersion != 3 || m.Topic != "tp" || m.Attempts != 2 ||
		m.Headers["k"] != "v" || m.OccurredAt.Location() != time.UTC || !m.OccurredAt.Equal(at) || !m.CreatedAt.Equal(at) {
		t.Errorf("DecodeRow = %+v", m)
	}
	for _, h := range []string{"", "null"} {
		m, err := sqlstore.DecodeRow(sqlstore.RowValues{EventID: id.String(), Headers: h})
		if err != nil || m.Headers != nil {
			t.Errorf("DecodeRow(headers %q) = %v, %v; want no headers", h, m.Headers, err)
		}
	}
	if _, err := sqlstore.DecodeRow(sqlstore.RowValues{ID: 9, EventID: "not-a-uuid"}); err == nil || !strings.Contains(err.Error(), "row 9") {
		t.Errorf("DecodeRow(bad event id) = %v, want an error naming row 9", err)
	}
	if _, err := sqlstore.DecodeRow(sqlstore.RowValues{ID: 9, EventID: id.String(), Headers: "{"}); err == nil || !strings.Contains(err.Error(), "row 9") {
		t.Errorf("DecodeRow(bad headers) = %v, want an error naming row 9", err)
	}
	h, err := sqlstore.EncodeHeaders(map[string]string{"k": "v"})
	if err != nil || h != `{"k":"v"}` {
		t.Errorf("EncodeHeaders = %q, %v", h, err)
	}
	if h, err := sqlstore.EncodeHeaders(nil); err != nil || h != "" {
		t.Errorf("EncodeHeaders(nil) = %q, %v; want \"\" (NULL)", h, err)
	}
}
