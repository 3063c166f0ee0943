package templates

import (
	"testing"
	"text/template"
)

// TestTemplatesParse checks that the embedded templates parse and define
// the blocks outboxgen executes.
func TestTemplatesParse(t *testing.T) {
	// The generator's FuncMap (outboxgen/internal/codegen) is stubbed: only
	// the names matter to the parser.
	funcs := template.FuncMap{"comment": func(...string) string { return "" }}
	tmpl, err := template.New("outboxgen").Funcs(funcs).ParseFS(FS, "*.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"header", "shared", "event", "version", "decode", "upcast", "checks", "check", "entry", "value"} {
		if tmpl.Lookup(name) == nil {
			t.Errorf("template %q is not defined", name)
		}
	}
}
