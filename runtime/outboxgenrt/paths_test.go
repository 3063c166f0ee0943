package outboxgenrt

import (
	"slices"
	"testing"
)

func TestMissingPaths(t *testing.T) {
	objects := []ObjectShape{
		0: {Required: []string{"a", "b"}, Nested: []NestedShape{{Key: "self", Value: Shape{Object: 0}}}},
	}
	root := &ObjectShape{
		Required: []string{"id"},
		Nested: []NestedShape{
			{Key: "o", Value: Shape{Object: 0}},
			{Key: "ml", Value: Shape{Containers: "ml", Object: 0}},
		},
	}
	tests := []struct {
		payload string
		want    []string
	}{
		{`{"id":1,"o":{"a":1,"b":2}}`, nil},
		{`{"o":{"a":1}}`, []string{"id", "o.b"}},
		{`{"id":1,"o":{"a":1,"b":2,"self":{"b":null}}}`, []string{"o.self.a", "o.self.b"}},
		{`{"id":1,"ml":{"k\"":[{"a":1,"b":2},{"b":2},null],"e":[],"n":null}}`, []string{`ml["k\""][1].a`, `ml["k\""][2]`}},
		{`{"id":1,"o":[1,2],"ml":{"k":{}}}`, nil}, // wrong types are left to json.Unmarshal
		{` { "id" : 1 , "o" : { "a" : 1 , "b" : 2 } } `, nil},
	}
	for _, tc := range tests {
		got, err := MissingPaths([]byte(tc.payload), root, objects)
		if err != nil {
			t.Errorf("MissingPaths(%s): %v", tc.payload, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("MissingPaths(%s) = %q, want %q", tc.payload, got, tc.want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"id":1,"o":{"a":1`, `{"id":1,"ml":{"k":[{"a":1},]}}`, `{"id" 1}`} {
		if _, err := MissingPaths([]byte(bad), root, objects); err == nil {
			t.Errorf("MissingPaths(%q): no error", bad)
		}
	}
}

func TestMissingPathsFlatValidPayloadDoesNotAllocate(t *testing.T) {
	root := &ObjectShape{Required: []string{"id", "x"}}
	payload := []byte(`{"id":1,"x":"y","z":[1,{"a":2}]}`)
	if n := testing.AllocsPerRun(100, func() {
		if m, err := MissingPaths(payload, root, nil); err != nil || m != nil {
			t.Fatal(m, err)
		}
	}); n != 0 {
		t.Errorf("MissingPaths allocates %v times for a flat valid payload", n)
	}
}
