package alltypes

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
)

// TestDecodeMissingNestedPaths: a required key missing from a nested
// object, a list element, a recursive object or an optional object that is
// present is reported by its full JSON path.
func TestDecodeMissingNestedPaths(t *testing.T) {
	v1, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	withLines := func(m map[string]any) {
		line := map[string]any{"sku": "A-1", "quantity": 1, "price": "1"}
		m["lines"] = []any{line, line, map[string]any{"quantity": 1, "price": "1"}}
	}
	tests := []struct {
		name string
		edit func(map[string]any)
		want []string
	}{
		{"nested object", func(m map[string]any) { delete(m["address"].(map[string]any), "city") }, []string{"address.city"}},
		{"null in a nested object", func(m map[string]any) { m["address"].(map[string]any)["city"] = nil }, []string{"address.city"}},
		{"list element", withLines, []string{"lines[2].sku"}},
		{"null list element", func(m map[string]any) { m["lines"] = []any{nil} }, []string{"lines[0]"}},
		{"recursive object", func(m map[string]any) {
			delete(m["address"].(map[string]any)["geo"].(map[string]any)["parent"].(map[string]any), "lng")
		}, []string{"address.geo.parent.lng"}},
		{"optional object present", func(m map[string]any) { m["second_address"] = map[string]any{"street": "x"} }, []string{"second_address.city"}},
		{"several, in schema order per object", func(m map[string]any) {
			a := m["address"].(map[string]any)
			delete(a, "city")
			delete(a, "street")
			delete(a["geo"].(map[string]any), "lat")
		}, []string{"address.street", "address.city", "address.geo.lat"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			payload := mutate(t, v1, tc.edit)
			_, err := DecodeCustomerRegistered(1, payload)
			var missing *runtime.MissingFieldsError
			if !errors.As(err, &missing) {
				t.Fatalf("DecodeCustomerRegistered(1, %s) = %v, want a *runtime.MissingFieldsError", payload, err)
			}
			if diff := cmp.Diff(tc.want, missing.Fields); diff != "" {
				t.Errorf("missing fields (-want +got):\n%s", diff)
			}
		})
	}
	// An optional nested object left out or null is not checked.
	for _, edit := range []func(map[string]any){
		func(m map[string]any) { delete(m, "second_address") },
		func(m map[string]any) { m["second_address"] = nil },
		func(m map[string]any) { m["address"].(map[string]any)["geo"] = nil },
	} {
		if _, err := DecodeCustomerRegistered(1, mutate(t, v1, edit)); err != nil {
			t.Errorf("decode: %v", err)
		}
	}
}
