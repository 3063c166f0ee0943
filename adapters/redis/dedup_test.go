package redis_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/adapters/redis"
	"github.com/gooutbox/outbox/runtime"
)

// streamUUIDs returns the message UUIDs of stream's entries, in stream order.
func streamUUIDs(t *testing.T, client *goredis.Client, stream string) []string {
	t.Helper()
	entries, err := client.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	uuids := make([]string, len(entries))
	for i, e := range entries {
		uuids[i], _ = e.Values["_watermill_message_uuid"].(string)
	}
	return uuids
}

// TestPublishSameMessageTwice publishes one message (one UUID) twice in
// separate calls, and twice within one call: each call succeeds and the
// stream holds the message once. Another stream takes the same UUID.
func TestPublishSameMessageTwice(t *testing.T) {
	client := connect(t)
	prefix := keyPrefix(t, client)
	pub := newPublisher(t, redis.PublisherConfig{})

	t.Run("separate calls", func(t *testing.T) {
		topic := prefix + "twice"
		msg := eventMessage("a", 1)
		for i := range 2 {
			if err := pub.Publish(topic, msg); err != nil {
				t.Fatalf("Publish #%d: %v", i+1, err)
			}
		}
		if got := streamUUIDs(t, client, topic); !slices.Equal(got, []string{msg.UUID}) {
			t.Errorf("stream = %v, want [%s] once", got, msg.UUID)
		}
		// The same event on another topic is another entry.
		other := prefix + "twice.other"
		if err := pub.Publish(other, msg); err != nil {
			t.Fatalf("Publish to %s: %v", other, err)
		}
		if n := client.XLen(context.Background(), other).Val(); n != 1 {
			t.Errorf("XLEN %s = %d, want 1 (dedup keys are per stream)", other, n)
		}
	})
	t.Run("one call", func(t *testing.T) {
		topic := prefix + "twice.one-call"
		m1, m2 := eventMessage("a", 1), eventMessage("a", 2)
		if err := pub.Publish(topic, m1, m1, m2, m1); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		if got := streamUUIDs(t, client, topic); !slices.Equal(got, []string{m1.UUID, m2.UUID}) {
			t.Errorf("stream = %v, want [%s %s]", got, m1.UUID, m2.UUID)
		}
	})
}

// TestRedriveIsNotADuplicate: a dead letter published again to its topic
// (a re-drive: the same UUID, with runtime/consumer's outbox_dlq_at
// metadata) is a new entry, though its event was published within
// DedupWindow; the same re-drive again is not. It was dropped as a repeat
// of the original publish (found with NATS by a new user's trial).
func TestRedriveIsNotADuplicate(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "redrive"
	pub := newPublisher(t, redis.PublisherConfig{})
	orig := eventMessage("a", 1)
	if err := pub.Publish(topic, orig); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	redrive := orig.Copy()
	redrive.Metadata.Set("outbox_dlq_at", "2026-12-03T10:20:00.123456789Z")
	for range 2 {
		if err := pub.Publish(topic, redrive); err != nil {
			t.Fatalf("Publish the re-drive: %v", err)
		}
	}
	if got := streamUUIDs(t, client, topic); !slices.Equal(got, []string{orig.UUID, orig.UUID}) {
		t.Errorf("stream = %v, want [%s] twice: the event and its re-drive once", got, orig.UUID)
	}
}

// TestDedupWindow: the dedup key expires after DedupWindow, and a later
// write of the message is a second entry.
func TestDedupWindow(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "window"
	pub := newPublisher(t, redis.PublisherConfig{DedupWindow: 200 * time.Millisecond})
	msg := eventMessage("a", 1)
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	key := "{" + topic + "}:outbox:dedup:" + msg.UUID
	ttl := client.PTTL(context.Background(), key).Val()
	if ttl <= 0 || ttl > 200*time.Millisecond {
		t.Errorf("PTTL %s = %s, want within (0, 200ms]", key, ttl)
	}
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	// The window ends when the key expires: wait for that, not for a
	// guess of how long it takes.
	for deadline := time.Now().Add(10 * time.Second); client.Exists(context.Background(), key).Val() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists 10s after a publish with a 200ms window", key)
		}
		time.Sleep(10 * time.Millisecond) // polling the key
	}
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	if n := client.XLen(context.Background(), topic).Val(); n != 2 {
		t.Errorf("XLEN = %d, want 2 (once within the window, once after)", n)
	}
}

// TestDedupDisabled: a negative DedupWindow publishes with plain XADD: no
// dedup key, and a repeated message is a second entry.
func TestDedupDisabled(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "nodedup"
	pub := newPublisher(t, redis.PublisherConfig{DedupWindow: -1})
	msg := eventMessage("a", 1)
	for range 2 {
		if err := pub.Publish(topic, msg); err != nil {
			t.Fatal(err)
		}
	}
	if n := client.XLen(context.Background(), topic).Val(); n != 2 {
		t.Errorf("XLEN = %d, want 2", n)
	}
	if n := client.Exists(context.Background(), "{"+topic+"}:outbox:dedup:"+msg.UUID).Val(); n != 0 {
		t.Errorf("dedup key exists with deduplication disabled")
	}
}

// TestFailedMessageIsNotRemembered: a message whose XADD fails (WRONGTYPE)
// leaves no dedup key, so it is added once the key is fixed.
func TestFailedMessageIsNotRemembered(t *testing.T) {
	client := connect(t)
	ctx := context.Background()
	topic := keyPrefix(t, client) + "wrongtype"
	if err := client.Set(ctx, topic, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, redis.PublisherConfig{})
	msg := eventMessage("a", 1)
	if err := pub.Publish(topic, msg); !runtime.IsPermanent(err) {
		t.Fatalf("Publish to a string key = %v, want a permanent error", err)
	}
	if n := client.Exists(ctx, "{"+topic+"}:outbox:dedup:"+msg.UUID).Val(); n != 0 {
		t.Errorf("dedup key of a failed message kept")
	}
	client.Del(ctx, topic)
	if err := pub.Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	if n := client.XLen(ctx, topic).Val(); n != 1 {
		t.Errorf("XLEN = %d, want 1", n)
	}
}

// TestScriptFlush: after SCRIPT FLUSH (as after a server restart) the
// publisher reloads its script and sends the batch again, in order.
func TestScriptFlush(t *testing.T) {
	client := connect(t)
	topic := keyPrefix(t, client) + "flush"
	pub := newPublisher(t, redis.PublisherConfig{})
	m0 := eventMessage("a", 0)
	if err := pub.Publish(topic, m0); err != nil {
		t.Fatal(err)
	}
	if err := client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	msgs := []*message.Message{eventMessage("a", 1), eventMessage("a", 2), m0}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish after SCRIPT FLUSH: %v", err)
	}
	want := []string{m0.UUID, msgs[0].UUID, msgs[1].UUID}
	if got := streamUUIDs(t, client, topic); !slices.Equal(got, want) {
		t.Errorf("stream = %v, want %v", got, want)
	}
}

// stallProxy is a TCP proxy to Redis whose connections can be frozen: a
// frozen connection buffers what the client sends instead of forwarding
// it, as a proxy that stalls or a partitioned network with TCP
// retransmitting does, and forwards it all when thawed, even after the
// client closed the connection.
type stallProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []*stallConn
}

type stallConn struct {
	client, server net.Conn
	fromServer     atomic.Int64 // bytes the server sent
	serverDone     chan struct{}

	mu        sync.Mutex
	frozen    bool
	buf       []byte
	clientEOF bool
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{t: t, ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
	})
	go p.accept()
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &stallConn{client: client, server: server, serverDone: make(chan struct{})}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go c.clientToServer()
		go c.serverToClient()
	}
}

func (c *stallConn) clientToServer() {
	b := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(b)
		c.mu.Lock()
		if n > 0 {
			if c.frozen {
				c.buf = append(c.buf, b[:n]...)
			} else {
				c.server.Write(b[:n])
			}
		}
		if err != nil {
			c.clientEOF = true
			if !c.frozen {
				c.server.(*net.TCPConn).CloseWrite()
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

func (c *stallConn) serverToClient() {
	defer close(c.serverDone)
	b := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(b)
		c.fromServer.Add(int64(n))
		if n > 0 {
			c.client.Write(b[:n]) // fails once the client is gone
		}
		if err != nil {
			c.client.Close()
			return
		}
	}
}

// freeze freezes the connections open now; later ones are not.
func (p *stallProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.mu.Lock()
		c.frozen = true
		c.mu.Unlock()
	}
}

// thaw forwards what the frozen connections buffered, and returns once
// Redis has executed it: it has answered, or closed the connection.
func (p *stallProxy) thaw() (stale int) {
	p.mu.Lock()
	conns := slices.Clone(p.conns)
	p.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if !c.frozen {
			c.mu.Unlock()
			continue
		}
		c.frozen = false
		before := c.fromServer.Load()
		buffered := len(c.buf)
		if buffered > 0 {
			c.server.Write(c.buf)
			c.buf = nil
			stale += buffered
		}
		if c.clientEOF {
			c.server.(*net.TCPConn).CloseWrite()
		}
		c.mu.Unlock()
		if buffered == 0 {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for c.fromServer.Load() == before {
			select {
			case <-c.serverDone:
			case <-time.After(5 * time.Millisecond):
				if time.Now().After(deadline) {
					p.t.Fatalf("no reply from Redis within 10s of forwarding %d stale bytes", buffered)
				}
				continue
			}
			break
		}
	}
	return stale
}

// TestStalledConnection reproduces the fault: the publisher's connection
// stalls with an XADD of m1 in flight, the write is retried on a working
// connection (by go-redis, or by the relay after Publish failed), m2 and
// m3 follow, and then the stalled bytes reach Redis. The stream must read
// m1 m2 m3, once each. Without deduplication the proxy makes the stream
// read m1 m2 m3 m1, which the "nodedup" subtests check, so that the test
// shows the fault is injected.
func TestStalledConnection(t *testing.T) {
	direct := connect(t)
	prefix := keyPrefix(t, direct)
	opts, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	for _, retry := range []string{"relay", "client"} {
		for _, dedup := range []bool{true, false} {
			name := retry + "/dedup"
			window := time.Duration(0)
			if !dedup {
				name, window = retry+"/nodedup", -1
			}
			t.Run(name, func(t *testing.T) {
				topic := prefix + "stall." + retry + "." + fmt.Sprint(dedup)
				proxy := newStallProxy(t, opts.Addr)
				popts := *opts
				popts.Addr = proxy.addr()
				popts.ReadTimeout = 300 * time.Millisecond
				popts.PoolSize = 1
				if retry == "relay" {
					popts.MaxRetries = -1 // Publish fails; the test republishes, as the relay does
				}
				proxied := goredis.NewClient(&popts)
				t.Cleanup(func() { proxied.Close() })
				if err := proxied.Ping(context.Background()).Err(); err != nil {
					t.Fatal(err) // the connection is open, its handshake done
				}
				pub := newPublisher(t, redis.PublisherConfig{Client: proxied, DedupWindow: window, PublishTimeout: 5 * time.Second})
				// The script is loaded before the stall, as on a running
				// publisher.
				if err := pub.Publish(prefix+"warmup", eventMessage("w", 0)); err != nil {
					t.Fatal(err)
				}

				m1, m2, m3 := eventMessage("a", 1), eventMessage("a", 2), eventMessage("a", 3)
				proxy.freeze()
				err := pub.Publish(topic, m1)
				retryPub := pub
				switch retry {
				case "relay":
					if err == nil {
						t.Fatal("Publish through a stalled connection without retries = nil, want a timeout")
					}
					// The relay's retry goes through another connection
					// (another relay process, or the pool's next one).
					retryPub = newPublisher(t, redis.PublisherConfig{DedupWindow: window})
					if err := retryPub.Publish(topic, m1); err != nil {
						t.Fatalf("republish m1: %v", err)
					}
				case "client":
					if err != nil {
						t.Fatalf("Publish (go-redis retries on a new connection) = %v, want nil", err)
					}
				}
				if err := retryPub.Publish(topic, m2); err != nil {
					t.Fatalf("publish m2: %v", err)
				}
				if err := retryPub.Publish(topic, m3); err != nil {
					t.Fatalf("publish m3: %v", err)
				}
				if stale := proxy.thaw(); stale == 0 {
					t.Fatal("nothing was stalled: the fault was not injected")
				}

				got := streamUUIDs(t, direct, topic)
				want := []string{m1.UUID, m2.UUID, m3.UUID}
				if !dedup {
					want = append(want, m1.UUID) // the stale XADD, after m3
				}
				if !slices.Equal(got, want) {
					t.Errorf("stream = %s, want %s", names(got, m1, m2, m3), names(want, m1, m2, m3))
				}
			})
		}
	}
}

// names returns uuids with m1, m2, m3 named.
func names(uuids []string, msgs ...*message.Message) []string {
	out := make([]string, len(uuids))
	for i, u := range uuids {
		out[i] = u
		for j, m := range msgs {
			if m.UUID == u {
				out[i] = fmt.Sprintf("m%d", j+1)
			}
		}
	}
	return out
}

// BenchmarkPublish publishes 100-message batches with and without
// deduplication.
func BenchmarkPublish(b *testing.B) {
	client := connect(b)
	prefix := keyPrefix(b, client)
	for _, bc := range []struct {
		name   string
		window time.Duration
	}{{"dedup", 0}, {"nodedup", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			topic := prefix + "bench." + bc.name
			pub := newPublisher(b, redis.PublisherConfig{DedupWindow: bc.window, MaxLen: 10000})
			msgs := make([]*message.Message, 100)
			b.ReportAllocs()
			for b.Loop() {
				for i := range msgs {
					msgs[i] = eventMessage(fmt.Sprintf("agg-%d", i%10), i)
				}
				if err := pub.Publish(topic, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
