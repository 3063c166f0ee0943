package nats_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gooutbox/outbox/adapters/nats"
)

// testServer is a nats-server process of the test's own, on a free port
// with its own store directory, so the test can kill and restart it
// without disturbing the shared server.
type testServer struct {
	bin  string
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startServer starts a nats-server with JetStream for t and stops it when
// t ends. It skips t when the nats-server binary is neither on PATH nor in
// /usr/sbin (where Debian's package puts it), or fails it when
// OUTBOX_TEST_REQUIRE_INTEGRATION=1.
func startServer(t *testing.T) *testServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/nats-server")
	}
	if err != nil {
		if os.Getenv("OUTBOX_TEST_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("nats-server binary is required (OUTBOX_TEST_REQUIRE_INTEGRATION=1) but neither on PATH nor in /usr/sbin: %v", err)
		}
		t.Skipf("nats-server binary neither on PATH nor in /usr/sbin (this test starts and kills its own server): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &testServer{bin: bin, addr: addr, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *testServer) url() string { return "nats://" + s.addr }

// start starts the server and waits until it answers with JetStream on.
func (s *testServer) start(t *testing.T) {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.Command(s.bin, "-a", host, "-p", port, "-js", "-sd", s.dir)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", s.bin, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !s.ready() {
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on %s not ready within 30s", s.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ready reports whether the server accepts connections and announces
// JetStream.
func (s *testServer) ready() bool {
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.Contains(line, `"jetstream":true`)
}

// kill kills the server (SIGKILL: a crash, which may lose what the server
// had not written yet, such as the latest acks) and waits for it to exit.
func (s *testServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// TestServerRestart kills the server under a publisher and a subscriber,
// keeps it down, and starts it again on the same store.
//
// While it is down, Publish fails at once with
// nats.ErrConnectionReconnecting, or nats.ErrDisconnected for a message in
// flight when the connection was lost (PublishTimeout is 30s here: the
// bound below does not depend on it). Once it is back, a publish succeeds
// within ReconnectWait plus nats.go's jitter (100ms), and the subscriber
// receives every message published (none lost, in order) within that plus
// MaxWait, each with a slack of 10s for a loaded machine. The outage is
// longer than nats.go's default 60 reconnect attempts at this
// ReconnectWait, after which a connection without MaxReconnects(-1) is
// closed for good.
//
// The server is killed right after it confirmed the subscriber's ack:
// nats-server writes a consumer's state asynchronously, so the restarted
// server holds that message as unacked (in every run so far), and with
// MaxAckPending 1 the group would wait AckWait (30s) for it, had the
// subscriber not acked it again after reconnecting.
func TestServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a nats-server; slow")
	}
	const (
		reconnectWait = 20 * time.Millisecond
		jitter        = 100 * time.Millisecond // nats.go's ReconnectJitter
		maxWait       = time.Second            // SubscriberConfig.MaxWait's default
		slack         = 10 * time.Second
		failFastBound = 2 * time.Second
		// down exceeds 60 attempts of reconnectWait+jitter (at most 7.2s).
		down = 8 * time.Second
	)
	srv := startServer(t)
	pub := newPublisher(t, nats.PublisherConfig{
		URL: srv.url(), ReconnectWait: reconnectWait, PublishTimeout: 30 * time.Second,
	})
	sub := newSubscriber(t, nats.SubscriberConfig{
		URL: srv.url(), ReconnectWait: reconnectWait, ConsumerGroup: "restart",
	})
	topic := "restart.orders"

	published := []*message.Message{eventMessage("order-1", 1)}
	if err := pub.Publish(topic, published[0]); err != nil {
		t.Fatalf("Publish before the restart: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	got := receive(t, ch)
	got.Ack()
	waitAcked(t, srv.url(), topic)
	srv.kill()

	// (1) While the server is down, Publish fails at once.
	retry := eventMessage("order-1", 2)
	downUntil := time.Now().Add(down)
	for tries := 0; tries == 0 || time.Now().Before(downUntil); tries++ {
		start := time.Now()
		err := pub.Publish(topic, retry)
		took := time.Since(start)
		switch {
		case err == nil:
			t.Fatal("Publish with the server down = nil, want an error")
		case took > failFastBound:
			t.Fatalf("Publish with the server down took %s (PublishTimeout 30s), want at most %s: %v", took, failFastBound, err)
		case !errors.Is(err, natsgo.ErrConnectionReconnecting) && !errors.Is(err, natsgo.ErrDisconnected):
			// ErrDisconnected: nats.go failed the PubAck of a message in
			// flight when the connection was lost.
			t.Fatalf("Publish with the server down = %v, want nats.ErrConnectionReconnecting or nats.ErrDisconnected", err)
		}
		time.Sleep(250 * time.Millisecond) // pace the tries, as the relay's backoff does
	}
	srv.start(t)
	back := time.Now()

	// (2) Once the server is back, a publish succeeds within about
	// ReconnectWait; the message that failed is published again, as the
	// relay would.
	publishBound := reconnectWait + jitter + slack
	for {
		err := pub.Publish(topic, retry)
		if err == nil {
			break
		}
		if time.Since(back) > publishBound {
			t.Fatalf("no successful Publish within %s of the server being back: %v", publishBound, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("first successful Publish %s after the server was back", time.Since(back).Round(time.Millisecond))
	published = append(published, retry)
	for seq := 3; seq <= 5; seq++ {
		msg := eventMessage("order-1", seq)
		if err := pub.Publish(topic, msg); err != nil {
			t.Fatalf("Publish(seq %d) after the restart: %v", seq, err)
		}
		published = append(published, msg)
	}

	// (3) The subscriber receives them all, in order, within about
	// ReconnectWait + MaxWait of the server being back. The message acked
	// before the kill may come again (at least once).
	receiveBound := reconnectWait + jitter + maxWait + slack
	var order []string
	seen := map[string]bool{}
	timeout := time.After(receiveBound - time.Since(back))
	for len(order) < len(published)-1 {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatal("subscription channel closed")
			}
			msg.Ack()
			if msg.UUID == published[0].UUID || seen[msg.UUID] {
				continue
			}
			seen[msg.UUID] = true
			order = append(order, msg.Metadata.Get("seq"))
		case <-timeout:
			t.Fatalf("received seqs %v within %s of the server being back, want [2 3 4 5]", order, receiveBound)
		}
	}
	t.Logf("all messages received %s after the server was back", time.Since(back).Round(time.Millisecond))
	if got, want := strings.Join(order, " "), "2 3 4 5"; got != want {
		t.Errorf("received seqs %s, want %s", got, want)
	}
}

// waitAcked waits until the server has the ack of every message of
// topic's stream for the group "restart".
func waitAcked(t *testing.T, url, topic string) {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	stream := nats.StreamName("OUTBOX", topic)
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := js.Consumer(ctx, stream, nats.ConsumerName("restart"))
		var acked uint64
		if err == nil {
			acked = info.CachedInfo().AckFloor.Stream
		}
		cancel()
		if err == nil && acked >= 1 && info.CachedInfo().NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ack not confirmed within %s (ack floor %d, err %v)", waitTimeout, acked, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
