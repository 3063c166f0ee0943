package nested

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
)

// TestDecodeMissingNestedPaths: a required key missing from an object
// inside lists and maps is reported by its full JSON path, the notation of
// Validate's errors, and a null object in a map is itself missing.
func TestDecodeMissingNestedPaths(t *testing.T) {
	payload, err := json.Marshal(valid())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(m map[string]any)
		want []string
	}{
		{"object in a map", func(m map[string]any) {
			delete(m["items"].(map[string]any)["i"].(map[string]any), "code")
		}, []string{`items["i"].code`}},
		{"object in a map in a list", func(m map[string]any) {
			delete(m["groups"].([]any)[1].(map[string]any)["a"].(map[string]any), "code")
		}, []string{`groups[1]["a"].code`}},
		{"null object in a map", func(m map[string]any) {
			m["items"].(map[string]any)["i"] = nil
		}, []string{`items["i"]`}},
		{"top level first, then nested in payload order", func(m map[string]any) {
			delete(m, "catalog_id")
			delete(m["groups"].([]any)[0].(map[string]any)["a"].(map[string]any), "code")
			delete(m["items"].(map[string]any)["i"].(map[string]any), "code")
		}, []string{"catalog_id", `groups[0]["a"].code`, `items["i"].code`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(payload, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			p, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeCatalogued(1, p)
			var missing *runtime.MissingFieldsError
			if !errors.As(err, &missing) {
				t.Fatalf("DecodeCatalogued(%s) = %v, want a *runtime.MissingFieldsError", p, err)
			}
			if diff := cmp.Diff(tc.want, missing.Fields); diff != "" {
				t.Errorf("missing fields (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := DecodeCatalogued(1, payload); err != nil {
		t.Errorf("the unmodified payload: %v", err)
	}
}
