package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/hooks/hookstest"
)

var summaryRE = regexp.MustCompile(`(?m)^committed (\d+), published (\d+), rolled back (\d+), ghosts 0, pending in outbox 0$`)

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
			got := out.String()
			m := summaryRE.FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("no summary line in output:\n%s", got)
			}
			// 12 orders placed, 12 payments of which every third (4) rolled back.
			if m[1] != "20" || m[2] != "20" || m[3] != "4" {
				t.Errorf("summary %q, want committed 20, published 20, rolled back 4", m[0])
			}
			if !strings.HasSuffix(got, m[0]+"\n") {
				t.Errorf("the summary is not the last line:\n%s", got)
			}
			for _, want := range []string{
				"shipments 8 (one per paid order)",
				// Order 4 is paid through the old checkout (v1) and
				// consumed upcast to v2 with the default channel.
				"consumed orders.order_paid v1  order 4   method=card amount=none channel=web (as v2)",
				"consumed orders.order_paid v2  order 5   method=card amount=50.00 channel=web (as v2)",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			// Order 3's payment was declined: its OrderPaid never reaches the consumer.
			if strings.Contains(got, "order_paid v2  order 3 ") {
				t.Errorf("the rolled-back payment of order 3 was consumed:\n%s", got)
			}
		})
	}
}
