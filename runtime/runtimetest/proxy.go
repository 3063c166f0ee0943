package runtimetest

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback for fault tests: it forwards connections
// to a target address (a database, a broker) and can cut them the ways
// networks do. Point the client at [Proxy.Addr] instead of the target.
//
//   - [Proxy.Blackhole] turns every open connection half-open: its bytes
//     are read and dropped in both directions and nothing is closed, as when
//     a NAT or firewall entry disappears. Those connections never recover;
//     new connections work, unless the proxy refuses them.
//   - [Proxy.Refuse] closes every open connection and resets new ones,
//     as a stopped server does, until [Proxy.Accept].
//   - [Proxy.BlackholeWhen] turns half-open the one connection whose
//     client sends bytes that match, from those bytes on: a cut at a
//     chosen statement (a COMMIT, say).
//   - [Proxy.Pause] holds every byte in flight, in both directions, on open
//     and new connections, until [Proxy.Resume] delivers them: a network
//     that stalls for a while and comes back.
//
// A Proxy is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	paused  chan struct{} // closed by Resume; nil when not paused
	refuse  bool
	conns   map[*proxyConn]bool
	wg      sync.WaitGroup
	closing bool
	trigger *trigger // armed by BlackholeWhen; nil otherwise
}

// trigger is an armed [Proxy.BlackholeWhen].
type trigger struct {
	match func([]byte) bool
	fired chan struct{}
}

type proxyConn struct {
	client, server net.Conn
	mu             sync.Mutex
	blackholed     bool
}

// StartProxy starts a proxy to target on a free loopback port; t's cleanup
// closes it.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("runtimetest: proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole makes every open connection half-open (see [Proxy]) and
// returns how many it hit.
func (p *Proxy) Blackhole() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		c.mu.Lock()
		if !c.blackholed {
			c.blackholed = true
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// BlackholeWhen arms a one-shot cut: the first bytes a client sends
// (as read in one chunk, up to 32 KiB) for which match returns true are
// dropped, and their connection alone turns half-open from then on (see
// [Proxy.Blackhole]). The returned channel is closed when that happens.
// match runs on the proxy's goroutines, one chunk at a time; it must not
// keep the slice. Arming again replaces a trigger that has not fired.
func (p *Proxy) BlackholeWhen(match func(fromClient []byte) bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trigger = &trigger{match: match, fired: make(chan struct{})}
	return p.trigger.fired
}

// fire reports whether chunk, which c's client sent, fires the armed
// trigger; if so it blackholes c and disarms the trigger.
func (p *Proxy) fire(c *proxyConn, chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trigger == nil || !p.trigger.match(chunk) {
		return false
	}
	c.mu.Lock()
	c.blackholed = true
	c.mu.Unlock()
	close(p.trigger.fired)
	p.trigger = nil
	return true
}

// ServerAddrs returns the local addresses of the proxy's open connections
// to the target: the client addresses the target sees (a database's list
// of sessions), so that a test can find the sessions that came through the
// proxy.
func (p *Proxy) ServerAddrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	addrs := make([]string, 0, len(p.conns))
	for c := range p.conns {
		addrs = append(addrs, c.server.LocalAddr().String())
	}
	return addrs
}

// Pause stops forwarding until Resume; bytes read meanwhile are held and
// delivered, in order, after Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused = make(chan struct{})
	}
}

// Resume undoes Pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

// waitResumed blocks while the proxy is paused.
func (p *Proxy) waitResumed() {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Refuse closes every open connection and refuses new ones until Accept.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refuse = true
	conns := p.conns
	p.conns = map[*proxyConn]bool{}
	p.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// Accept undoes Refuse.
func (p *Proxy) Accept() {
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	p.closing = true
	conns := p.conns
	p.conns = map[*proxyConn]bool{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.Resume()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, closing := p.refuse, p.closing
		p.mu.Unlock()
		if refuse || closing {
			if tc, ok := client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, as from a closed port
			}
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		p.conns[c] = true
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(c, c.client, c.server, true) })
		p.wg.Go(func() { p.pipe(c, c.server, c.client, false) })
	}
}

// pipe copies from src to dst until src fails, dropping the bytes while c is
// blackholed; fromClient says that src is the client, whose bytes may fire
// the armed trigger.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn, fromClient bool) {
	defer func() {
		c.mu.Lock()
		blackholed := c.blackholed
		c.mu.Unlock()
		if !blackholed {
			c.close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitResumed()
			if fromClient {
				p.fire(c, buf[:n])
			}
			c.mu.Lock()
			blackholed := c.blackholed
			c.mu.Unlock()
			if !blackholed {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return // EOF, a reset or a closed side: the pipe ends
		}
	}
}

func (c *proxyConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
}
