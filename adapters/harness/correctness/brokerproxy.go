package main

// The relays' way to the broker: one Kafka-aware TCP proxy per relay in the
// driving process. It forwards whole Kafka frames, so that it can
//
//   - hold every byte in both directions (Pause, for brokercut) and deliver
//     it at Resume;
//   - blackhole the link as a real network partition does (Split, for
//     netsplit; see Split);
//   - answer produce requests slowly (Slow: each produce response is held
//     before it is forwarded), so that a fault lands inside a publish;
//   - call a hook when it forwards a produce request (freeze SIGSTOPs the
//     relay right then);
//   - tell which relay wrote each record of the log: it reads the base
//     offset of every produce response and the record count of its request,
//     and keeps (relay, partition, offsets, time). The records themselves
//     are not touched, so no consumer can tell the relays apart.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// appendRange is one produce request's records on the log, as the broker's
// response placed them: offsets [Base, Base+N) of Partition, written by
// relay Relay, whose proxy read the response at At.
type appendRange struct {
	Relay     int
	Partition int32
	Base      int64
	N         int32
	At        time.Time
}

// brokerProxy is one relay's fault proxy to the broker (see the file
// comment). It is safe for concurrent use.
type brokerProxy struct {
	relay  int
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu        sync.Mutex
	hold      chan struct{} // closed when forwarding resumes; nil while forwarding
	split     bool          // the hold is a blackhole (Split), not a stall (Pause)
	slow      time.Duration // each produce response is held this long
	onProduce func()        // called once, when a produce request is forwarded
	conns     map[*bpConn]bool
	appends   []appendRange
	closing   bool
	dropped   int // client frames dropped because their connection was reset
}

// bpConn is one proxied connection.
type bpConn struct {
	p         *brokerProxy
	client    net.Conn
	bornSplit bool // accepted during a split: its SYN never reached the broker
	// reset is set when the relay aborted the connection (a read returned
	// ECONNRESET): the frames a split holds are dropped, as a kernel drops
	// its send queue on close with SO_LINGER 0.
	reset      atomic.Bool
	clientGone atomic.Bool // the relay's side is closed, one way or another

	mu      sync.Mutex
	server  net.Conn // nil until dialled
	closed  bool
	produce map[int32]produceReq // in-flight produce requests by correlation id
}

// produceReq is what a produce response needs from its request.
type produceReq struct {
	version int16
	counts  map[int32]int32 // records per partition of the topic
}

// frame is one Kafka frame (size prefix included) on its way.
type frame struct {
	b       []byte
	release time.Time // not forwarded before
	produce bool      // a produce request
}

// startBrokerProxies starts n broker proxies to target, one per relay;
// stop closes them.
func startBrokerProxies(n int, target string) (proxies []*brokerProxy, stop func(), err error) {
	for i := range n {
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			for _, p := range proxies {
				p.close()
			}
			return nil, nil, fmt.Errorf("broker proxy: listen: %w", lerr)
		}
		p := &brokerProxy{relay: i, ln: ln, target: target, conns: map[*bpConn]bool{}}
		p.wg.Go(p.accept)
		proxies = append(proxies, p)
	}
	return proxies, func() {
		for _, p := range proxies {
			p.close()
		}
	}, nil
}

// Addr is the proxy's "host:port".
func (p *brokerProxy) Addr() string { return p.ln.Addr().String() }

// Pause holds every frame in both directions, on open and new connections,
// until Resume delivers them in order: a network that stalls and comes
// back (brokercut).
func (p *brokerProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
}

// Resume undoes Pause and Split.
func (p *brokerProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
	p.split = false
}

// Split blackholes the link until Heal (Resume), as a network partition
// does: nothing the relay sends is delivered and nothing comes back. What
// the relay wrote on an open connection is held (its kernel would
// retransmit it) and delivered at Heal, also when the relay closed the
// connection gracefully (FIN) meanwhile — but dropped when the relay
// aborted it (a reset, SO_LINGER 0), which discards the send queue. The
// broker's answers held meanwhile reach the relay at Heal if its
// connection is still open. A connection the relay opens during the split
// reaches the broker only if it is still open at Heal (its SYN is
// retransmitted); one closed before is never delivered.
func (p *brokerProxy) Split() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
	p.split = true
}

// Heal undoes Split.
func (p *brokerProxy) Heal() { p.Resume() }

// Slow holds each produce response d before it reaches the relay (0: not
// at all): a broker that answers slowly.
func (p *brokerProxy) Slow(d time.Duration) {
	p.mu.Lock()
	p.slow = d
	p.mu.Unlock()
}

// OnProduce arms f, called once (on the proxy's goroutine) right after the
// proxy forwards a produce request to the broker.
func (p *brokerProxy) OnProduce(f func()) {
	p.mu.Lock()
	p.onProduce = f
	p.mu.Unlock()
}

// Appends returns the produce requests' records on the log so far.
func (p *brokerProxy) Appends() []appendRange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]appendRange(nil), p.appends...)
}

// droppedFrames is how many of the relay's frames were dropped because it
// reset their connection while they were held.
func (p *brokerProxy) droppedFrames() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *brokerProxy) close() {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return
	}
	p.closing = true
	conns := p.conns
	p.conns = map[*bpConn]bool{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.Resume()
	p.wg.Wait()
}

// waitOpen blocks while the link is held; it returns whether the hold was
// a split when it began waiting.
func (p *brokerProxy) waitOpen() (wasSplit bool) {
	for {
		p.mu.Lock()
		ch, split := p.hold, p.split
		p.mu.Unlock()
		if ch == nil {
			return wasSplit
		}
		wasSplit = wasSplit || split
		<-ch
	}
}

func (p *brokerProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		c := &bpConn{p: p, client: client, bornSplit: p.split, produce: map[int32]produceReq{}}
		p.conns[c] = true
		p.mu.Unlock()
		up := make(chan frame, 4096)
		p.wg.Go(func() { c.readClient(up) })
		p.wg.Go(func() { c.writeServer(up) })
	}
}

func (c *bpConn) close() {
	c.mu.Lock()
	c.closed = true
	srv := c.server
	c.mu.Unlock()
	_ = c.client.Close()
	if srv != nil {
		_ = srv.Close()
	}
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// readFrame reads one size-prefixed Kafka frame.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 64<<20 {
		return nil, fmt.Errorf("kafka frame of %d bytes", n)
	}
	b := make([]byte, 4+n)
	copy(b, size[:])
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return nil, err
	}
	return b, nil
}

// readClient reads the relay's frames into up until the relay's side
// fails; a produce request's correlation id and record counts are kept
// for its response.
func (c *bpConn) readClient(up chan<- frame) {
	defer close(up)
	for {
		b, err := readFrame(c.client)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				c.reset.Store(true)
			}
			c.clientGone.Store(true)
			return
		}
		f := frame{b: b}
		if corr, req, ok := parseProduceRequest(b[4:]); ok {
			f.produce = true
			c.mu.Lock()
			c.produce[corr] = req
			c.mu.Unlock()
		}
		up <- f
	}
}

// writeServer forwards the relay's frames to the broker, dialling it on
// the first frame, holding them while the link is held.
func (c *bpConn) writeServer(up <-chan frame) {
	p := c.p
	defer func() {
		// The relay's side is done: let the broker answer what it got,
		// then close (readServer closes the rest).
		c.mu.Lock()
		srv := c.server
		c.mu.Unlock()
		if srv == nil {
			c.close()
			return
		}
		// Keep the broker's side open until it answered every produce
		// request forwarded (at most 5 s): a half-close could make the
		// broker drop an answer, and the answer says where the records
		// went (attribution).
		go func() {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				c.mu.Lock()
				n := len(c.produce)
				c.mu.Unlock()
				if n == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			c.close()
		}()
	}()
	heldBySplit := false
	for f := range up {
		if p.waitOpen() {
			heldBySplit = true
		}
		if heldBySplit && c.reset.Load() {
			// Held by a split and aborted by the relay before it went
			// out: the relay's kernel discarded it with its send queue.
			p.mu.Lock()
			p.dropped++
			p.mu.Unlock()
			continue
		}
		c.mu.Lock()
		srv, closed := c.server, c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		if srv == nil {
			if c.bornSplit && c.clientGone.Load() {
				// Opened and closed during the split: it never existed
				// for the broker.
				p.mu.Lock()
				p.dropped++
				p.mu.Unlock()
				continue
			}
			var err error
			if srv, err = net.Dial("tcp", p.target); err != nil {
				return
			}
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				_ = srv.Close()
				return
			}
			c.server = srv
			c.mu.Unlock()
			down := make(chan frame, 4096)
			p.wg.Go(func() { c.readServer(srv, down) })
			p.wg.Go(func() { c.writeClient(down) })
		}
		if _, err := srv.Write(f.b); err != nil {
			return
		}
		if f.produce {
			p.mu.Lock()
			hook := p.onProduce
			p.onProduce = nil
			p.mu.Unlock()
			if hook != nil {
				hook()
			}
		}
	}
}

// readServer reads the broker's frames into down until the broker's side
// fails, recording where each produce response put its records.
func (c *bpConn) readServer(srv net.Conn, down chan<- frame) {
	defer close(down)
	for {
		b, err := readFrame(srv)
		if err != nil {
			return
		}
		now := time.Now()
		f := frame{b: b, release: now}
		if len(b) >= 8 {
			corr := int32(binary.BigEndian.Uint32(b[4:8]))
			c.mu.Lock()
			req, ok := c.produce[corr]
			delete(c.produce, corr)
			c.mu.Unlock()
			if ok {
				c.p.mu.Lock()
				f.release = now.Add(c.p.slow)
				c.p.appends = append(c.p.appends, parseProduceResponse(c.p.relay, b[8:], req, now)...)
				c.p.mu.Unlock()
			}
		}
		down <- f
	}
}

// writeClient forwards the broker's frames to the relay, each not before
// its release time, holding them while the link is held.
func (c *bpConn) writeClient(down <-chan frame) {
	defer c.close()
	failed := false
	for f := range down {
		c.p.waitOpen()
		if d := time.Until(f.release); d > 0 {
			time.Sleep(d)
		}
		if failed || c.clientGone.Load() {
			continue // nobody to deliver to; keep reading the responses
		}
		if _, err := c.client.Write(f.b); err != nil {
			failed = true
		}
	}
}

// parseProduceRequest reads a request frame's header and, for a produce
// request, its correlation id, version and record counts per partition of
// the topic.
func parseProduceRequest(b []byte) (int32, produceReq, bool) {
	if len(b) < 10 {
		return 0, produceReq{}, false
	}
	key := int16(binary.BigEndian.Uint16(b[0:2]))
	if key != int16(kmsg.Produce) {
		return 0, produceReq{}, false
	}
	version := int16(binary.BigEndian.Uint16(b[2:4]))
	corr := int32(binary.BigEndian.Uint32(b[4:8]))
	rest := b[8:]
	idLen := int16(binary.BigEndian.Uint16(rest[0:2]))
	rest = rest[2:]
	if idLen > 0 {
		if int(idLen) > len(rest) {
			return 0, produceReq{}, false
		}
		rest = rest[idLen:]
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	if req.IsFlexible() {
		var ok bool
		if rest, ok = skipTags(rest); !ok {
			return 0, produceReq{}, false
		}
	}
	if err := req.ReadFrom(rest); err != nil {
		return 0, produceReq{}, false
	}
	pr := produceReq{version: version, counts: map[int32]int32{}}
	for _, t := range req.Topics {
		if t.Topic != topic {
			continue
		}
		for _, part := range t.Partitions {
			pr.counts[part.Partition] += countRecords(part.Records)
		}
	}
	return corr, pr, true
}

// countRecords counts the records of a produce request's record batches.
func countRecords(raw []byte) int32 {
	var n int32
	for len(raw) >= 12 {
		length := int(int32(binary.BigEndian.Uint32(raw[8:12])))
		if length <= 0 || 12+length > len(raw) {
			break
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw[:12+length]); err != nil {
			break
		}
		n += rb.NumRecords
		raw = raw[12+length:]
	}
	return n
}

// skipTags skips a flexible header's tagged fields.
func skipTags(b []byte) ([]byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, false
	}
	b = b[w:]
	for range n {
		_, w := binary.Uvarint(b)
		if w <= 0 {
			return nil, false
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < size {
			return nil, false
		}
		b = b[w+int(size):]
	}
	return b, true
}

// parseProduceResponse reads a produce response's body (after the
// correlation id) and returns where it put the records of req.
func parseProduceResponse(relay int, b []byte, req produceReq, at time.Time) []appendRange {
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.version)
	if resp.IsFlexible() {
		var ok bool
		if b, ok = skipTags(b); !ok {
			return nil
		}
	}
	if err := resp.ReadFrom(b); err != nil {
		return nil
	}
	var out []appendRange
	for _, t := range resp.Topics {
		if t.Topic != topic {
			continue
		}
		for _, part := range t.Partitions {
			if part.ErrorCode != 0 || part.BaseOffset < 0 {
				continue
			}
			if n := req.counts[part.Partition]; n > 0 {
				out = append(out, appendRange{Relay: relay, Partition: part.Partition, Base: part.BaseOffset, N: n, At: at})
			}
		}
	}
	return out
}
