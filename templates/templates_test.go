package templates

import (
	"testing"
	"text/template"
)

// TestTemplatesParse checks that the embedded templates parse and define
// the blocks outboxgen executes.
func TestTemplatesParse(t *testing.T) {
	tmpl, err := template.New("outboxgen").ParseFS(FS, "*.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"header", "shared", "event"} {
		if tmpl.Lookup(name) == nil {
			t.Errorf("template %q is not defined", name)
		}
	}
}
