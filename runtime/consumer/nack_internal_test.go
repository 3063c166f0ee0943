package consumer

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNextNackDelayDoublesAndResets(t *testing.T) {
	t.Parallel()
	c := &Consumer{cfg: Config{NackDelay: time.Second, MaxNackDelay: 5 * time.Second}}
	var got []time.Duration
	for range 5 {
		d, _ := c.nextNackDelay("m1")
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delays of one message nacked again and again (-want +got):\n%s", diff)
	}
	if d, n := c.nextNackDelay("m2"); d != time.Second || n != 1 {
		t.Errorf("another message's first nack: delay %v, count %d, want 1s, 1", d, n)
	}
	c.forgetNacks("m1")
	if d, n := c.nextNackDelay("m1"); d != time.Second || n != 1 {
		t.Errorf("nack after an ack: delay %v, count %d, want 1s, 1 again", d, n)
	}
}

func TestLoudNackOnPowersOfTwo(t *testing.T) {
	t.Parallel()
	var got []int
	for n := range 100 {
		if loudNack(n) {
			got = append(got, n)
		}
	}
	if diff := cmp.Diff([]int{1, 2, 4, 8, 16, 32, 64}, got); diff != "" {
		t.Errorf("nacks in a row logged at WARN (-want +got):\n%s", diff)
	}
}
