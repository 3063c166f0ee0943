package runtimetest_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line and reads the answer with a deadline.
func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	return r.ReadString('\n')
}

func TestProxyFaults(t *testing.T) {
	p := runtimetest.StartProxy(t, echoServer(t))
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	if got, err := roundTrip(c, r, "a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	// Pause: nothing comes back until Resume, then the held bytes do.
	p.Pause()
	if got, err := roundTrip(c, r, "b", 200*time.Millisecond); err == nil {
		t.Fatalf("paused: got %q, want a timeout", got)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "b\n" {
		t.Fatalf("after Resume: %q, %v; want the held line", got, err)
	}

	// Blackhole: the open connection never answers again, and is not
	// closed; a new connection works.
	if n := p.Blackhole(); n != 1 {
		t.Fatalf("Blackhole hit %d connections, want 1", n)
	}
	if got, err := roundTrip(c, r, "c", 300*time.Millisecond); err == nil {
		t.Fatalf("half-open: got %q, want a timeout", got)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("half-open: %v, want a timeout (not a reset)", err)
	}
	c2, r2 := dial()
	if got, err := roundTrip(c2, r2, "d", 5*time.Second); err != nil || got != "d\n" {
		t.Fatalf("new connection after Blackhole: %q, %v", got, err)
	}

	// Refuse: open connections are closed, new ones reset, until Accept.
	p.Refuse()
	if _, err := roundTrip(c2, r2, "e", 5*time.Second); err == nil {
		t.Fatal("refused: the open connection still answers")
	}
	// A refused connection is reset: at connect, or at the first exchange.
	if c3, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c3.Close()
		if got, err := roundTrip(c3, bufio.NewReader(c3), "f", 5*time.Second); err == nil {
			t.Fatalf("refused: a new connection answered %q", got)
		}
	}
	p.Accept()
	c4, r4 := dial()
	if got, err := roundTrip(c4, r4, "g", 5*time.Second); err != nil || got != "g\n" {
		t.Fatalf("after Accept: %q, %v", got, err)
	}
}
