package outboxgenrt

import (
	"testing"

	"github.com/gooutbox/outbox/runtime"
)

func TestIsDecimal(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "12": true, "-0.50": true, "12.34": true, "007": true,
		"": false, "-": false, "1.": false, ".5": false, "+1": false, "1e3": false,
		"1.2.3": false, " 1": false, "--1": false, "1,5": false,
	} {
		if got := IsDecimal(s); got != want {
			t.Errorf("IsDecimal(%q) = %v, want %v", s, got, want)
		}
	}
}

func positive(n int) *runtime.FieldError {
	if n <= 0 {
		return &runtime.FieldError{Problem: "must be positive"}
	}
	return nil
}

func TestInvalidEntry(t *testing.T) {
	tests := []struct {
		m       map[string]int
		wantKey string
	}{
		{m: nil},
		{m: map[string]int{"a": 1, "b": 2}},
		{m: map[string]int{"a": 1, "b": 0, "c": -1, "d": 0}, wantKey: "b"},
		{m: map[string]int{"": 0, "a": 0}, wantKey: ""},
		{m: map[string]int{"z": -3}, wantKey: "z"},
	}
	for _, tt := range tests {
		// Map order is random: the smallest failing key must win every time.
		for range 20 {
			k, err := InvalidEntry(tt.m, positive)
			wantErr := false
			for _, v := range tt.m {
				wantErr = wantErr || v <= 0
			}
			if k != tt.wantKey || (err != nil) != wantErr {
				t.Fatalf("InvalidEntry(%v) = %q, %v; want key %q, error %v", tt.m, k, err, tt.wantKey, wantErr)
			}
		}
	}
}

func TestInvalidEntryAllocs(t *testing.T) {
	m := map[string]int{"a": 1, "b": 2, "c": 3}
	if n := testing.AllocsPerRun(100, func() { _, _ = InvalidEntry(m, positive) }); n != 0 {
		t.Errorf("InvalidEntry of a valid map allocates %v times per call, want 0", n)
	}
}
