package export

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

func TestFiles(t *testing.T) {
	f, err := schema.Parse("dir/events.yaml", []byte(`outboxgen: 1
types:
  Node:
    fields:
      children: {type: "list<Node>"}
events:
  A:
    type: a.a
    aggregate: Thing
    versions:
      1:
        fields:
          root: Node
          n: {type: int32, optional: true, min: 1}
      2:
        fields:
          root: Node
          n: {type: int32, optional: true, min: 1}
          m: {type: int64, default: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"a.a/v1.schema.json", "a.a/v2.schema.json", "asyncapi.json"}, names); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	var v2 struct {
		Schema     string                     `json:"$schema"`
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(files["a.a/v2.schema.json"], &v2); err != nil {
		t.Fatal(err)
	}
	if v2.Schema != jsonSchemaDialect || v2.Defs["Node"] == nil {
		t.Errorf("v2 schema = %+v", v2)
	}
	if diff := cmp.Diff([]string{"event_version", "occurred_at", "root", "m"}, v2.Required); diff != "" {
		t.Errorf("required (-want +got):\n%s", diff)
	}
	var doc struct {
		AsyncAPI string `json:"asyncapi"`
		Channels map[string]struct {
			Address string `json:"address"`
		} `json:"channels"`
		Components struct {
			Messages map[string]struct {
				Deprecated bool `json:"deprecated"`
			} `json:"messages"`
		} `json:"components"`
	}
	if err := json.Unmarshal(files["asyncapi.json"], &doc); err != nil {
		t.Fatal(err)
	}
	if doc.AsyncAPI != "3.0.0" || doc.Channels["thing"].Address != "thing" {
		t.Errorf("asyncapi = %+v", doc)
	}
	if !doc.Components.Messages["AV1"].Deprecated || doc.Components.Messages["AV2"].Deprecated {
		t.Errorf("superseded versions must be deprecated, the latest not: %+v", doc.Components.Messages)
	}
}
