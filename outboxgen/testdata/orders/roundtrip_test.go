package orders

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

// TestDecodeStoredPayloads decodes a stored payload of every historical
// version through the registry and the upcaster chain into the latest
// version.
func TestDecodeStoredPayloads(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	id := uuid.MustParse("0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f")
	ref := "psp-1"
	tests := []struct {
		file    string
		version int
		want    OrderPaid
	}{
		{"payloads/v1.json", 1, OrderPaid{EventVersion: 3, OccurredAt: at, OrderID: id, Amount: Money{Value: "19.99", Currency: "EUR"}, PaymentMethod: PaymentMethodCard, Lines: map[string]Money{}, RefundWindowDays: 14}},
		{"payloads/v2.json", 2, OrderPaid{EventVersion: 3, OccurredAt: at, OrderID: id, Amount: Money{Value: "19.99", Currency: "EUR"}, PaymentMethod: PaymentMethodWallet, ProviderRef: &ref, Lines: map[string]Money{"sku-1": {Value: "19.99", Currency: "EUR"}}, RefundWindowDays: 14}},
		{"payloads/v3.json", 3, OrderPaid{EventVersion: 3, OccurredAt: at, OrderID: id, Amount: Money{Value: "19.99", Currency: "EUR"}, PaymentMethod: PaymentMethodCard, Tags: []string{"gift"}, Lines: map[string]Money{}, RefundWindowDays: 30}},
	}
	reg := runtime.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		payload, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := reg.Decode(OrderPaidType, tt.version, payload)
		if err != nil {
			t.Errorf("Decode(%s) error: %v", tt.file, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Decode(%s) (-want +got):\n%s", tt.file, diff)
		}
	}
}

func TestNewValidateRoundTrip(t *testing.T) {
	clk := runtime.ClockFunc(func() time.Time { return time.Date(2026, 1, 2, 4, 4, 5, 123456789, time.FixedZone("X", 3600)) })
	e := NewOrderPaid(clk, uuid.New(), Money{Value: "1.00", Currency: "USD"}, PaymentMethodWallet)
	if got, want := e.OccurredAt, time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("OccurredAt = %v, want %v in UTC", got, want)
	}
	if err := e.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	env, err := runtime.NewEnvelope(t.Context(), runtime.NewEventID(), e, "order", "1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeOrderPaid(env.EventVersion, env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		version int
		payload string
		check   func(error) bool
	}{
		{"newer version", 4, `{}`, func(err error) bool {
			var uv *runtime.UnknownVersionError
			return errors.As(err, &uv) && uv.Newer()
		}},
		{"missing keys", 1, `{"event_version":1}`, func(err error) bool {
			var mf *runtime.MissingFieldsError
			return errors.As(err, &mf) && len(mf.Fields) == 5
		}},
		{"invalid field", 1, `{"event_version":1,"occurred_at":"2026-01-02T03:04:05Z","order_id":"0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f","amount_cents":0,"currency":"EUR","payment_method":"card"}`, func(err error) bool {
			var fe *runtime.FieldError
			return errors.As(err, &fe) && fe.Field == "amount_cents"
		}},
		{"enum not in v1", 1, `{"event_version":1,"occurred_at":"2026-01-02T03:04:05Z","order_id":"0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f","amount_cents":5,"currency":"EUR","payment_method":"wallet"}`, func(err error) bool {
			var fe *runtime.FieldError
			return errors.As(err, &fe) && fe.Field == "payment_method"
		}},
		{"nested field", 3, `{"event_version":3,"occurred_at":"2026-01-02T03:04:05Z","order_id":"0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f","amount":{"value":"1","currency":"EUR"},"payment_method":"card","lines":{"a":{"value":"x","currency":"EUR"}},"refund_window_days":1}`, func(err error) bool {
			var fe *runtime.FieldError
			return errors.As(err, &fe) && fe.Field == `lines["a"].value`
		}},
		{"version mismatch", 3, string(mustJSON(t, map[string]any{"event_version": 2})), func(err error) bool {
			var de *runtime.DecodeError
			return errors.As(err, &de)
		}},
		{"not an object", 2, `[1]`, func(err error) bool {
			var de *runtime.DecodeError
			return errors.As(err, &de)
		}},
	}
	for _, tt := range tests {
		_, err := DecodeOrderPaid(tt.version, []byte(tt.payload))
		if err == nil || !tt.check(err) {
			t.Errorf("%s: DecodeOrderPaid(%d, %s) error = %v", tt.name, tt.version, tt.payload, err)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
