package consumer

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNextNackDelayDoublesAndResets(t *testing.T) {
	c := &Consumer{cfg: Config{NackDelay: time.Second, MaxNackDelay: 5 * time.Second}}
	var got []time.Duration
	for range 5 {
		got = append(got, c.nextNackDelay("m1"))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delays of one message nacked again and again (-want +got):\n%s", diff)
	}
	if d := c.nextNackDelay("m2"); d != time.Second {
		t.Errorf("another message's first delay = %v, want 1s", d)
	}
	c.forgetNacks("m1")
	if d := c.nextNackDelay("m1"); d != time.Second {
		t.Errorf("delay after an ack = %v, want 1s again", d)
	}
}
