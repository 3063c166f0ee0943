// Package export writes a schema's events as interchange documents for
// consumers that do not use Go: one JSON Schema (draft 2020-12) per event
// version and one AsyncAPI 3.0 document for the whole schema.
//
// The documents describe the payload as outboxgen's generated code writes
// and reads it: declared properties, required keys, constraints and
// defaults; additionalProperties stays open because readers ignore unknown
// keys. Output is deterministic (encoding/json sorts map keys).
package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"strconv"

	"github.com/gooutbox/outbox/outboxgen/internal/schema"
)

const jsonSchemaDialect = "https://json-schema.org/draft/2020-12/schema"

// Files returns the exported documents by slash-separated relative path:
// <type>/v<N>.schema.json for every event version and asyncapi.json.
func Files(f *schema.File) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, ev := range f.Events {
		for _, v := range ev.Versions {
			defs := map[string]any{}
			s := versionSchema(ev, v, "#/$defs/", defs)
			s["$schema"] = jsonSchemaDialect
			s["$id"] = fmt.Sprintf("urn:outbox:%s:v%d", ev.Type, v.Number)
			if len(defs) > 0 {
				s["$defs"] = defs
			}
			data, err := marshal(s)
			if err != nil {
				return nil, err
			}
			out[fmt.Sprintf("%s/v%d.schema.json", ev.Type, v.Number)] = data
		}
	}
	doc, err := marshal(AsyncAPI(f))
	if err != nil {
		return nil, err
	}
	out["asyncapi.json"] = doc
	return out, nil
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// versionSchema is the JSON Schema of one event version's payload; object
// types go into defs and are referenced as refPrefix+Name.
func versionSchema(ev *schema.Event, v *schema.Version, refPrefix string, defs map[string]any) map[string]any {
	props := map[string]any{
		"event_version": map[string]any{"const": v.Number, "description": "Schema version of the payload."},
		"occurred_at":   map[string]any{"type": "string", "format": "date-time", "description": "When the event occurred (UTC, microsecond precision)."},
	}
	required := []string{"event_version", "occurred_at"}
	for _, f := range v.Fields {
		props[f.Name] = fieldSchema(f, refPrefix, defs)
		if !f.Optional {
			required = append(required, f.Name)
		}
	}
	s := map[string]any{
		"title":                fmt.Sprintf("%s v%d", ev.Name, v.Number),
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": true,
		"x-outbox-type":        ev.Type,
		"x-outbox-version":     v.Number,
		"x-outbox-aggregate":   ev.Aggregate,
	}
	if desc := joinDoc(ev.Doc, v.Doc); desc != "" {
		s["description"] = desc
	}
	if ev.Deprecated != "" || v.Deprecated != "" {
		s["deprecated"] = true
	}
	if v.Breaking {
		s["x-outbox-breaking"] = true
	}
	return s
}

func joinDoc(parts ...string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += "\n\n"
		}
		out += p
	}
	return out
}

func fieldSchema(f *schema.Field, refPrefix string, defs map[string]any) map[string]any {
	s := typeSchema(f.Type, f, refPrefix, defs, true)
	if f.Doc != "" {
		s["description"] = f.Doc
	}
	if f.Deprecated != "" {
		s["deprecated"] = true
	}
	if f.Default != nil {
		s["default"] = f.Default.Value
	}
	return s
}

// typeSchema maps a field type to JSON Schema. Constraints of f apply to
// the field's own scalar; enum narrowing applies to the innermost enum.
// Required lists and maps may be null: encoding/json writes a nil slice or
// map as null.
func typeSchema(t *schema.Type, f *schema.Field, refPrefix string, defs map[string]any, top bool) map[string]any {
	switch t.Kind {
	case schema.String:
		s := map[string]any{"type": "string"}
		if f != nil && top {
			if f.MaxLength != nil {
				s["maxLength"] = *f.MaxLength
			}
			if f.Pattern != "" {
				s["pattern"] = f.Pattern
			}
		}
		return s
	case schema.Bool:
		return map[string]any{"type": "boolean"}
	case schema.Int32, schema.Int64:
		// The bounds are the Go type's, narrowed by min and max: the
		// decoder rejects a number its type cannot hold, and a format
		// (int32, int64) is only an annotation to most validators.
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if t.Kind == schema.Int32 {
			lo, hi = math.MinInt32, math.MaxInt32
		}
		if f != nil && top {
			if f.Min != nil {
				lo = *f.Min
			}
			if f.Max != nil {
				hi = *f.Max
			}
		}
		return map[string]any{"type": "integer", "format": t.String(), "minimum": lo, "maximum": hi}
	case schema.Decimal:
		return map[string]any{"type": "string", "pattern": schema.DecimalPattern, "x-outbox-format": "decimal"}
	case schema.UUID:
		return map[string]any{"type": "string", "format": "uuid"}
	case schema.Timestamp:
		return map[string]any{"type": "string", "format": "date-time"}
	case schema.EnumKind:
		values := t.Enum.Values
		if f != nil && f.Values != nil {
			values = f.Values
		}
		s := map[string]any{"type": "string", "enum": values, "title": t.Enum.Name}
		if t.Enum.Doc != "" {
			s["description"] = t.Enum.Doc
		}
		return s
	case schema.ObjectKind:
		addDef(t.Object, refPrefix, defs)
		return map[string]any{"$ref": refPrefix + t.Object.Name}
	case schema.List:
		s := map[string]any{"type": "array", "items": typeSchema(t.Elem, f, refPrefix, defs, false)}
		if top && !f.Optional {
			s["type"] = []string{"array", "null"}
		}
		return s
	case schema.Map:
		s := map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem, f, refPrefix, defs, false)}
		if top && !f.Optional {
			s["type"] = []string{"object", "null"}
		}
		return s
	}
	return map[string]any{}
}

func addDef(o *schema.Object, refPrefix string, defs map[string]any) {
	if _, ok := defs[o.Name]; ok {
		return
	}
	s := map[string]any{"title": o.Name, "type": "object", "additionalProperties": true}
	defs[o.Name] = s // before recursing: object types may refer to themselves
	props := map[string]any{}
	required := []string{}
	for _, f := range o.Fields {
		props[f.Name] = fieldSchema(f, refPrefix, defs)
		if !f.Optional {
			required = append(required, f.Name)
		}
	}
	s["properties"] = props
	s["required"] = required
	if o.Doc != "" {
		s["description"] = o.Doc
	}
}

// AsyncAPI returns the AsyncAPI 3.0 document of f: one channel per
// aggregate (the default topic of the outbox relay is the aggregate type in
// snake_case), one message per (type, version), a send operation per
// channel. Superseded and deprecated versions are marked deprecated.
func AsyncAPI(f *schema.File) map[string]any {
	schemas := map[string]any{}
	messages := map[string]any{}
	channels := map[string]any{}
	operations := map[string]any{}
	total := 0
	for _, ev := range f.Events {
		channel := schema.SnakeName(ev.Aggregate)
		ch, ok := channels[channel].(map[string]any)
		if !ok {
			ch = map[string]any{"address": channel, "messages": map[string]any{}, "description": fmt.Sprintf("Events of the %s aggregate, keyed by aggregate id.", ev.Aggregate)}
			channels[channel] = ch
			operations["publish"+schema.GoName(channel)] = map[string]any{
				"action":   "send",
				"channel":  map[string]any{"$ref": "#/channels/" + channel},
				"messages": []any{},
				"summary":  "Published by the outbox relay after the recording transaction commits.",
			}
		}
		op := operations["publish"+schema.GoName(channel)].(map[string]any)
		for _, v := range ev.Versions {
			total++
			name := fmt.Sprintf("%sV%d", ev.Name, v.Number)
			schemas[name] = versionSchema(ev, v, "#/components/schemas/", schemas)
			msg := map[string]any{
				"name":        ev.Type,
				"title":       fmt.Sprintf("%s v%d", ev.Name, v.Number),
				"contentType": "application/json",
				"payload":     map[string]any{"$ref": "#/components/schemas/" + name},
				"headers": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"event_type":     map[string]any{"const": ev.Type},
						"event_version":  map[string]any{"const": strconv.Itoa(v.Number)},
						"event_id":       map[string]any{"type": "string", "format": "uuid"},
						"aggregate_type": map[string]any{"type": "string"},
						"aggregate_id":   map[string]any{"type": "string"},
						"occurred_at":    map[string]any{"type": "string", "format": "date-time"},
					},
					"required": []string{"event_type", "event_version", "event_id", "aggregate_type", "aggregate_id", "occurred_at"},
				},
				"x-outbox-type":    ev.Type,
				"x-outbox-version": v.Number,
			}
			if d := joinDoc(ev.Doc, v.Doc); d != "" {
				msg["description"] = d
			}
			if ev.Deprecated != "" || v.Deprecated != "" || v.Number < ev.Latest().Number {
				msg["deprecated"] = true
			}
			messages[name] = msg
			ch["messages"].(map[string]any)[name] = map[string]any{"$ref": "#/components/messages/" + name}
			op["messages"] = append(op["messages"].([]any), map[string]any{"$ref": "#/channels/" + channel + "/messages/" + name})
		}
	}
	title := "outbox events"
	if f.Package != "" {
		title = f.Package + " events"
	}
	return map[string]any{
		"asyncapi": "3.0.0",
		"info": map[string]any{
			"title":       title,
			"version":     strconv.Itoa(total),
			"description": "Generated by outboxgen from " + path.Base(filepath.ToSlash(f.Path)) + "; version counts the event versions it describes.",
		},
		"defaultContentType": "application/json",
		"channels":           channels,
		"operations":         operations,
		"components":         map[string]any{"schemas": schemas, "messages": messages},
	}
}
