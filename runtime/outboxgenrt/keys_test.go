package outboxgenrt

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMissingKeys(t *testing.T) {
	tests := []struct {
		payload string
		keys    []string
		want    []string
		wantErr bool
	}{
		{payload: `{}`, keys: nil, want: nil},
		{payload: `{}`, keys: []string{"a"}, want: []string{"a"}},
		{payload: ` {"a":1, "b" : "x"} `, keys: []string{"a", "b"}, want: nil},
		{payload: `{"a":{"b":1,"c":[1,{"d":2}]},"e":"}{\"]"}`, keys: []string{"a", "b", "c", "d", "e"}, want: []string{"b", "c", "d"}},
		{payload: `{"a\u0062":true,"c":null}`, keys: []string{"ab", "c"}, want: []string{"c"}},      // null counts as missing
		{payload: `{"a":1,"a":null,"b":null,"b":2}`, keys: []string{"a", "b"}, want: []string{"a"}}, // the last duplicate wins
		{payload: `{"a":null, "b":2}`, keys: []string{"a", "b"}, want: []string{"a"}},
		{payload: `{"A":1}`, keys: []string{"a"}, want: []string{"a"}},
		{payload: `{"a":[],"b":{},"c":-1.5e3}`, keys: []string{"c", "x", "a"}, want: []string{"x"}},
		{payload: `[]`, keys: []string{"a"}, wantErr: true},
		{payload: `null`, keys: []string{"a"}, wantErr: true},
		{payload: ``, keys: []string{"a"}, wantErr: true},
		{payload: `{"a":1`, keys: []string{"a"}, wantErr: true},
		{payload: `{"a" 1}`, keys: []string{"a"}, wantErr: true},
		{payload: `{"a":}`, keys: []string{"a"}, wantErr: true},
		{payload: `{"a":"x}`, keys: []string{"a"}, wantErr: true},
		{payload: `{"a":{"b":1}`, keys: []string{"a"}, wantErr: true},
	}
	for _, tt := range tests {
		got, err := MissingKeys([]byte(tt.payload), tt.keys...)
		if (err != nil) != tt.wantErr {
			t.Errorf("MissingKeys(%q, %q) error = %v, want error %v", tt.payload, tt.keys, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("MissingKeys(%q, %q) (-want +got):\n%s", tt.payload, tt.keys, diff)
		}
	}
}

func TestMissingKeysManyKeys(t *testing.T) {
	obj := map[string]int{}
	var keys []string
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		keys = append(keys, k)
		if i%7 != 0 {
			obj[k] = i
		}
	}
	payload, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MissingKeys(payload, keys...)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < 100; i += 7 {
		want = append(want, fmt.Sprintf("k%d", i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MissingKeys (-want +got):\n%s", diff)
	}
}

func TestMissingKeysAllocs(t *testing.T) {
	payload := []byte(`{"event_version":1,"occurred_at":"2026-01-02T03:04:05Z","order_id":"x","lines":[{"a":1}]}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := MissingKeys(payload, "event_version", "occurred_at", "order_id", "lines"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("MissingKeys allocates %v times per call, want 0", allocs)
	}
}

// FuzzMissingKeys checks MissingKeys against encoding/json on every input
// that encoding/json accepts as an object: same keys found with a non-null
// value, never a panic.
func FuzzMissingKeys(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":{"b":[1,"]"]},"c":"\"}"}`, `[1]`, `{"a\n":true}`, `{"é":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		keys := []string{"a", "b", "c", "é", "a\n"}
		got, err := MissingKeys(payload, keys...)
		var obj map[string]json.RawMessage
		if json.Unmarshal(payload, &obj) != nil || obj == nil {
			return // MissingKeys may accept or reject invalid JSON; only no panic matters
		}
		if err != nil {
			t.Fatalf("MissingKeys(%q) error %v on a valid object", payload, err)
		}
		var want []string
		for _, k := range keys {
			found := false
			for ok, v := range obj {
				if ok == k && string(v) != "null" {
					found = true
				}
			}
			if !found {
				want = append(want, k)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("MissingKeys(%q) (-want +got):\n%s", payload, diff)
		}
	})
}

func ExampleMissingKeys() {
	missing, err := MissingKeys([]byte(`{"event_version":1,"order_id":"x","nested":{"occurred_at":1}}`),
		"event_version", "occurred_at", "order_id")
	fmt.Println(missing, err)
	// Output: [occurred_at] <nil>
}
