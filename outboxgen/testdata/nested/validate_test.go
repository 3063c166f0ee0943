package nested

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

func valid() Catalogued {
	return Catalogued{
		EventVersion: 1,
		OccurredAt:   time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CatalogID:    uuid.MustParse("0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f"),
		Prices:       map[string]string{"a": "1.00", "b": "2"},
		Colors:       map[string][]Color{"a": {ColorRed, ColorGreen}},
		Groups:       []map[string]Item{{"a": {Code: "x"}}, {"a": {Code: "y", Prices: map[string]string{"p": "3.5"}}}},
		Matrix:       map[string]map[string]Color{"r": {"c": ColorGreen}},
		Items:        map[string]Item{"i": {Code: "z"}},
		Favourite:    map[string]Color{"f": ColorRed},
	}
}

// TestValidatePaths checks the JSON path and problem of the first invalid
// value in lists, maps, nested maps and objects. Where several map entries
// fail, the smallest key is reported, whatever the iteration order.
func TestValidatePaths(t *testing.T) {
	tests := []struct {
		name      string
		change    func(*Catalogued)
		wantField string
	}{
		{"map of decimals", func(e *Catalogued) { e.Prices["c"] = "x"; e.Prices["d"] = "y" }, `prices["c"]`},
		{"list in a map", func(e *Catalogued) { e.Colors["b"] = []Color{ColorRed, "blue"} }, `colors["b"][1]`},
		{"object in a map in a list", func(e *Catalogued) { e.Groups[1]["b"] = Item{Code: "B"} }, `groups[1]["b"].code`},
		{"map in an object in a map in a list", func(e *Catalogued) { e.Groups[1]["a"].Prices["q"] = "1e3" }, `groups[1]["a"].prices["q"]`},
		{"map in a map", func(e *Catalogued) { e.Matrix["r"]["d"] = "blue"; e.Matrix["s"] = map[string]Color{"a": "x"} }, `matrix["r"]["d"]`},
		{"object in a map", func(e *Catalogued) { e.Items["j"] = Item{Code: "1"}; e.Items["k"] = Item{} }, `items["j"].code`},
		{"optional map", func(e *Catalogued) { e.Favourite["g"] = "blue" }, `favourite["g"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 10 { // map order is random; the result must not be
				e := valid()
				tt.change(&e)
				err := e.Validate()
				var fe *runtime.FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("Validate() = %v, want a *runtime.FieldError", err)
				}
				if fe.Field != tt.wantField {
					t.Fatalf("Validate() = %v, want field %s", err, tt.wantField)
				}
			}
		})
	}
}

func TestValidateValidDoesNotAllocate(t *testing.T) {
	e := valid()
	if err := e.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = e.Validate() }); n != 0 {
		t.Errorf("Validate of a valid event allocates %v times per call, want 0", n)
	}
}
