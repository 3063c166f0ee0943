package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/gooutbox/outbox/hooks/hookstest"
)

var summaryRE = regexp.MustCompile(`committed (\d+), published (\d+), rolled back (\d+), ghosts 0, pending in outbox 0`)

// TestQuickstart runs the quickstart as a user would, on its embedded
// defaults and on PostgreSQL.
func TestQuickstart(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"sqlite", func(*testing.T) []string { return []string{"-orders", "12"} }},
		{"postgres", func(t *testing.T) []string {
			return []string{"-orders", "12", "-database-url", hookstest.PostgresDSN(t)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(context.Background(), tc.args(t), &out, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			m := summaryRE.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no summary line in output:\n%s", out.String())
			}
			// 12 orders placed, 12 payments of which every third (4) rolled back.
			if m[1] != "20" || m[2] != "20" || m[3] != "4" {
				t.Errorf("summary %q, want committed 20, published 20, rolled back 4", m[0])
			}
		})
	}
}
