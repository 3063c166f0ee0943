package alltypes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gooutbox/outbox/outboxgen/internal/export"
	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

// exportedSchemas compiles the JSON Schemas (2020-12) outboxgen exports for
// this package's events.yaml with a real validator, formats asserted (uuid,
// date-time), by version.
func exportedSchemas(t *testing.T) map[int]*jsonschema.Schema {
	t.Helper()
	src, err := os.ReadFile("events.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := schema.Parse("events.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	files, err := export.Files(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	out := map[int]*jsonschema.Schema{}
	for v := 1; v <= CustomerRegisteredLatestVersion; v++ {
		name := fmt.Sprintf("%s/v%d.schema.json", CustomerRegisteredType, v)
		data, ok := files[name]
		if !ok {
			t.Fatalf("export has no %s", name)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		url := "https://schemas.example.invalid/" + name
		if err := c.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
		if out[v], err = c.Compile(url); err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
	}
	return out
}

func validate(t *testing.T, s *jsonschema.Schema, payload []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(v)
}

// TestJSONSchemaAcceptsWrittenPayloads: what the generated code writes, and
// the stored v1 payload it decodes, are valid under the exported schemas.
func TestJSONSchemaAcceptsWrittenPayloads(t *testing.T) {
	schemas := exportedSchemas(t)
	v1, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, schemas[1], v1); err != nil {
		t.Errorf("stored v1 payload against the v1 schema: %v", err)
	}
	e, err := DecodeCustomerRegistered(1, v1)
	if err != nil {
		t.Fatal(err)
	}
	written, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, schemas[2], written); err != nil {
		t.Errorf("payload written by the generated v2 code against the v2 schema: %v\n%s", err, written)
	}
	// The same event with every optional field left out.
	minimal := mutate(t, written, func(m map[string]any) {
		for _, k := range []string{"attributes", "referrer", "second_address", "loyalty_points", "last_seen", "customer_status"} {
			delete(m, k)
		}
		addr := m["address"].(map[string]any)
		delete(addr, "zip")
		delete(addr, "geo")
	})
	e2, err := DecodeCustomerRegistered(2, minimal)
	if err != nil {
		t.Fatalf("decode the minimal payload: %v", err)
	}
	minimalWritten, err := json.Marshal(e2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{minimal, minimalWritten} {
		if err := validate(t, schemas[2], p); err != nil {
			t.Errorf("minimal v2 payload against the v2 schema: %v\n%s", err, p)
		}
	}
}

// mutate decodes a JSON object, applies edit and encodes it again.
func mutate(t *testing.T, payload []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJSONSchemaAgreesWithDecoder: payloads that break the schema one rule
// at a time are rejected by the exported JSON Schema and by the generated
// decoder alike, so the schema published for other consumers says what the
// Go code enforces.
func TestJSONSchemaAgreesWithDecoder(t *testing.T) {
	schemas := exportedSchemas(t)
	v1, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeCustomerRegistered(1, v1)
	if err != nil {
		t.Fatal(err)
	}
	valid, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	set := func(path string, v any) func(map[string]any) {
		return func(m map[string]any) {
			keys := strings.Split(path, ".")
			var cur any = m
			for _, k := range keys[:len(keys)-1] {
				switch c := cur.(type) {
				case map[string]any:
					cur = c[k]
				case []any:
					var i int
					fmt.Sscan(k, &i)
					cur = c[i]
				}
			}
			last := keys[len(keys)-1]
			if v == nil {
				delete(cur.(map[string]any), last)
				return
			}
			cur.(map[string]any)[last] = v
		}
	}
	tests := []struct {
		name string
		edit func(map[string]any)
	}{
		{"required field missing", set("email", nil)},
		{"required field of a nested object missing", set("address.city", nil)},
		{"required field of a list element missing", set("lines.0.sku", nil)},
		{"required field of a recursive object missing", set("address.geo.lat", nil)},
		{"string too long", set("email", strings.Repeat("a", 250)+"@b.cd")},
		{"pattern", set("email", "no-at-sign")},
		{"pattern in a nested object", set("address.zip", "1234")},
		{"pattern in a list element", set("lines.0.sku", "lower")},
		{"integer below min", set("age", -1)},
		{"integer above max", set("age", 151)},
		{"integer below min in a list element", set("lines.0.quantity", 0)},
		{"not an integer", set("age", "42")},
		{"fractional integer", set("age", 4.5)},
		{"int32 out of range in a recursive object", set("address.geo.lat", 1<<40)},
		{"int64 out of range", set("lucky_number", json.Number("100000000000000000000"))},
		{"uuid", set("customer_id", "not-a-uuid")},
		{"date-time", set("registered_at", "yesterday")},
		{"decimal", set("fee", "1.2.3")},
		{"decimal in a list element", set("lines.0.price", "9,99")},
		{"enum value", set("channel", "fax")},
		{"enum value in nested lists", set("nested", []any{[]any{"fax"}})},
		{"map value type", set("scores", map[string]any{"s": []any{"x"}})},
		{"list instead of object", set("address", []any{})},
		{"bool as string", set("vip", "true")},
		{"event_version of another version", set("event_version", 1)},
	}
	if err := validate(t, schemas[2], valid); err != nil {
		t.Fatalf("the unmodified payload is invalid: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			payload := mutate(t, valid, tc.edit)
			schemaErr := validate(t, schemas[2], payload)
			_, decodeErr := DecodeCustomerRegistered(2, payload)
			if schemaErr == nil {
				t.Errorf("the JSON Schema accepts %s", payload)
			}
			if decodeErr == nil {
				t.Errorf("the generated decoder accepts %s", payload)
			}
		})
	}
}

// TestJSONSchemaV1Narrowing: the v1 schema carries v1's own constraints (the
// narrowed enum), as the generated v1 decoder does.
func TestJSONSchemaV1Narrowing(t *testing.T) {
	schemas := exportedSchemas(t)
	v1, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(map[string]any){
		func(m map[string]any) { m["channel"] = "point-of-sale" }, // in the enum, not in v1's values
		func(m map[string]any) { m["status"] = "pending" },
		func(m map[string]any) { m["nickname"] = strings.Repeat("n", 21) },
	} {
		payload := mutate(t, v1, edit)
		if err := validate(t, schemas[1], payload); err == nil {
			t.Errorf("the v1 JSON Schema accepts %s", payload)
		}
		if _, err := DecodeCustomerRegistered(1, payload); err == nil {
			t.Errorf("the generated v1 decoder accepts %s", payload)
		}
	}
}
