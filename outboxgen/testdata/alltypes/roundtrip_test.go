package alltypes

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

// TestDecodeV1 decodes a stored v1 payload that uses every field type
// through the generated v1 → v2 upcaster: widened ints, enum and uuid to
// string, optional to required with default, removed and new fields.
func TestDecodeV1(t *testing.T) {
	payload, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCustomerRegistered(1, payload)
	if err != nil {
		t.Fatal(err)
	}
	ref := "11111111-2222-3333-4444-555555555555"
	points := int64(5)
	zip := "12345"
	want := CustomerRegistered{
		EventVersion: 2,
		OccurredAt:   time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC),
		CustomerID:   uuid.MustParse("0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f"),
		Email:        "a@example.com",
		Age:          42,
		VIP:          true,
		Balance:      "-1.50",
		RegisteredAt: time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC),
		Channel:      ChannelMobileApp,
		Address: Address{Street: "Main St 1", City: "Springfield", Zip: &zip,
			Geo: &Geo{Lat: 1, Lng: 2, Parent: &Geo{Lat: 3, Lng: 4}}},
		Lines:            []Line{{SKU: "A-1", Quantity: 2, Price: "9.99", Tags: []string{"x"}}},
		Attributes:       map[string]string{"k": "v"},
		Scores:           map[string][]int64{"s": {1, 2}},
		Nested:           [][]Channel{{ChannelWeb}, {ChannelMobileApp, ChannelWeb}},
		Referrer:         &ref,
		LuckyNumber:      13,
		Status:           "open",
		LoyaltyPoints:    &points,
		Locale:           "en-US",
		Since:            time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		Partner:          uuid.MustParse("00000000-0000-0000-0000-000000000001"),
		Fee:              "0.00",
		PreferredChannel: ChannelWeb,
		Labels:           []string{},
		Counters:         map[string]int64{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeCustomerRegistered(1) (-want +got):\n%s", diff)
	}
	// The latest version marshals and decodes back unchanged.
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidatePaths(t *testing.T) {
	payload, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeCustomerRegistered(1, payload)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		edit  func(*CustomerRegistered)
		field string
	}{
		{"nested object", func(e *CustomerRegistered) { e.Address.Geo.Parent = &Geo{} }, ""},
		{"list element", func(e *CustomerRegistered) { e.Lines[0].Quantity = 0 }, "lines[0].quantity"},
		{"pattern in list", func(e *CustomerRegistered) { e.Lines[0].SKU = "a" }, "lines[0].sku"},
		{"nested list enum", func(e *CustomerRegistered) { e.Nested[1][0] = "fax" }, "nested[1][0]"},
		{"optional zip", func(e *CustomerRegistered) { z := "1"; e.Address.Zip = &z }, "address.zip"},
		{"max length", func(e *CustomerRegistered) { e.Address.Street = string(make([]rune, 101)) }, "address.street"},
		{"decimal default", func(e *CustomerRegistered) { e.Fee = "free" }, "fee"},
	}
	for _, tt := range tests {
		c := e
		c.Address.Geo = &Geo{Lat: 1, Lng: 2}
		c.Lines = []Line{e.Lines[0]}
		c.Nested = [][]Channel{{ChannelWeb}, {ChannelWeb}}
		tt.edit(&c)
		err := c.Validate()
		if tt.field == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
			}
			continue
		}
		if err == nil || fieldOf(err) != tt.field {
			t.Errorf("%s: Validate() = %v, want an error on %s", tt.name, err, tt.field)
		}
	}
}

func fieldOf(err error) string {
	var fe *runtime.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}
