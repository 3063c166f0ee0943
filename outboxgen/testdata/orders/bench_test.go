package orders

import (
	"encoding/json"
	"os"
	"testing"
)

// BenchmarkDecodeUpcast decodes stored payloads through the generated
// decoder: required-key scan, json.Unmarshal, Validate, upcasts to v3 and
// Validate again.
func BenchmarkDecodeUpcast(b *testing.B) {
	for _, v := range []int{1, 2, 3} {
		payload, err := os.ReadFile("payloads/v" + string(rune('0'+v)) + ".json")
		if err != nil {
			b.Fatal(err)
		}
		b.Run("v"+string(rune('0'+v)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeOrderPaid(v, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJSONUnmarshalLatest is the baseline: plain json.Unmarshal of a
// latest-version payload into the latest struct, no checks.
func BenchmarkJSONUnmarshalLatest(b *testing.B) {
	payload, err := os.ReadFile("payloads/v3.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var e OrderPaid
		if err := json.Unmarshal(payload, &e); err != nil {
			b.Fatal(err)
		}
	}
}
