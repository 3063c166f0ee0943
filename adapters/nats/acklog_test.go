package nats

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// subjects returns the subjects l would ack again at now.
func (l *ackLog) subjects(now time.Time) []string {
	l.trim(now)
	var s []string
	for _, e := range l.entries[l.head:] {
		s = append(s, e.subject)
	}
	return s
}

func TestAckLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	t.Run("keeps the acks of the last maxAge", func(t *testing.T) {
		l := ackLog{maxAge: 30 * time.Second}
		l.add("a", t0)
		l.add("", t0.Add(time.Second)) // no reply subject: nothing to ack again
		l.add("b", t0.Add(10*time.Second))
		l.add("c", t0.Add(20*time.Second))
		if diff := cmp.Diff([]string{"a", "b", "c"}, l.subjects(t0.Add(29*time.Second))); diff != "" {
			t.Errorf("subjects at 29s (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"c"}, l.subjects(t0.Add(45*time.Second))); diff != "" {
			t.Errorf("subjects at 45s (-want +got):\n%s", diff)
		}
		if got := l.subjects(t0.Add(time.Minute)); len(got) != 0 {
			t.Errorf("subjects at 1m = %v, want none", got)
		}
	})
	t.Run("keeps at most maxAcks, the latest", func(t *testing.T) {
		l := ackLog{maxAge: time.Hour}
		var want []string
		for i := range 3*maxAcks + 7 {
			s := fmt.Sprint(i)
			l.add(s, t0.Add(time.Duration(i)*time.Millisecond))
			want = append(want, s)
		}
		want = want[len(want)-maxAcks:]
		got := l.subjects(t0.Add(time.Minute))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("subjects (-want +got):\n%s", diff)
		}
		if n := len(l.entries); n > 2*maxAcks {
			t.Errorf("len(entries) = %d, want at most %d", n, 2*maxAcks)
		}
	})
}
