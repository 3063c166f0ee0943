package main

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCheckStale feeds checkStale a hand-made log with known writers: the
// fenced relay's records before its successor's first record of their
// aggregate are fine, a late duplicate of the successor's last event is
// late but not stale, a late older event is stale, and records outside
// the window or of another aggregate do not count.
func TestCheckStale(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := fenceWindow{Fault: faultFreeze, Relay: 1, From: t0, To: t0.Add(10 * time.Second)}
	ev := func(id, agg string, tx int64) ledgerEvent {
		return ledgerEvent{ID: id, AggregateID: agg, Tx: tx, Seq: 1}
	}
	in := checkInput{
		Ledger: map[string]ledgerEvent{
			"k1": ev("k1", "K", 1), "k2": ev("k2", "K", 2), "k3": ev("k3", "K", 3),
			"j1": ev("j1", "J", 4), "j2": ev("j2", "J", 5),
		},
		Commits: map[int64]commitWindow{1: {10, 20}, 2: {30, 40}, 3: {50, 60}, 4: {10, 20}, 5: {30, 40}},
	}
	log := []delivery{
		{EventID: "k1", AggregateID: "K", Partition: 0, Offset: 0}, // relay 1, before the fault
		{EventID: "k1", AggregateID: "K", Partition: 0, Offset: 1}, // relay 1 in the window, before the successor's: fine
		{EventID: "k1", AggregateID: "K", Partition: 0, Offset: 2}, // successor
		{EventID: "k2", AggregateID: "K", Partition: 0, Offset: 3}, // successor
		{EventID: "k2", AggregateID: "K", Partition: 0, Offset: 4}, // relay 1: late, not stale (nothing newer before it)
		{EventID: "k1", AggregateID: "K", Partition: 0, Offset: 5}, // relay 1: stale (behind k2)
		{EventID: "j1", AggregateID: "J", Partition: 0, Offset: 6}, // relay 1: no successor record of J yet
		{EventID: "j2", AggregateID: "J", Partition: 0, Offset: 7}, // successor
		{EventID: "j1", AggregateID: "J", Partition: 0, Offset: 8}, // relay 1 after the window: not counted
		{EventID: "k3", AggregateID: "K", Partition: 0, Offset: 9}, // successor
	}
	appends := []appendRange{
		{Relay: 1, Partition: 0, Base: 0, N: 1, At: t0.Add(-time.Second)},
		{Relay: 1, Partition: 0, Base: 1, N: 1, At: t0.Add(time.Millisecond)},
		{Relay: 2, Partition: 0, Base: 2, N: 2, At: t0.Add(3 * time.Second)},
		{Relay: 1, Partition: 0, Base: 4, N: 3, At: t0.Add(7 * time.Second)},
		{Relay: 2, Partition: 0, Base: 7, N: 1, At: t0.Add(8 * time.Second)},
		{Relay: 1, Partition: 0, Base: 8, N: 1, At: t0.Add(11 * time.Second)},
		{Relay: 2, Partition: 0, Base: 9, N: 1, At: t0.Add(12 * time.Second)},
	}
	got := checkStale(w, log, attribute(appends), in)
	type summary struct{ Wrote, Late, Stale int }
	if diff := cmp.Diff(summary{Wrote: 4, Late: 2, Stale: 1}, summary{got.Wrote, got.Late, got.Stale}); diff != "" {
		t.Errorf("checkStale (-want +got):\n%s", diff)
	}
	if len(got.Examples) != 1 || got.failure() == "" {
		t.Errorf("checkStale examples = %q, failure %q; want one stale example and a failure", got.Examples, got.failure())
	}
}

// TestBrokerProxySplit checks the blackhole's model: a frame the client
// wrote during a split reaches the server at the heal when the client
// closed gracefully, never when it reset the connection, and never from a
// connection opened and closed during the split.
func TestBrokerProxySplit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					b, err := readFrame(c)
					if err != nil {
						return
					}
					got <- string(b[4+10:]) // after a v1 header with an empty client id
				}
			}()
		}
	}()
	proxies, stop, err := startBrokerProxies(1, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p := proxies[0]
	// frame is a metadata request (key 3, v0) whose body is body.
	frame := func(body string) []byte {
		b := make([]byte, 4+10+len(body))
		binary.BigEndian.PutUint32(b, uint32(10+len(body)))
		binary.BigEndian.PutUint16(b[4:], 3)
		binary.BigEndian.PutUint16(b[12:], 0) // client id length 0
		copy(b[14:], body)
		return b
	}
	dial := func() *net.TCPConn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.TCPConn)
	}
	expect := func(want string) {
		t.Helper()
		select {
		case s := <-got:
			if s != want {
				t.Errorf("server got %q, want %q", s, want)
			}
		case <-time.After(2 * time.Second):
			if want != "" {
				t.Errorf("server got nothing, want %q", want)
			}
			return
		}
		if want == "" {
			t.Errorf("server got a frame, want none")
		}
	}

	// An open connection: it works, then its bytes are held by the split.
	fin, reset := dial(), dial()
	for _, c := range []*net.TCPConn{fin, reset} {
		if _, err := c.Write(frame("before")); err != nil {
			t.Fatal(err)
		}
		expect("before")
	}
	p.Split()
	if _, err := fin.Write(frame("fin")); err != nil {
		t.Fatal(err)
	}
	if _, err := reset.Write(frame("reset")); err != nil {
		t.Fatal(err)
	}
	born := dial()
	if _, err := born.Write(frame("born")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	_ = fin.Close()
	_ = reset.SetLinger(0)
	_ = reset.Close()
	_ = born.Close()
	time.Sleep(100 * time.Millisecond)
	p.Heal()
	expect("fin")
	expect("")
}
