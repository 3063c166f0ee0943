package amqp_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/amqp"
)

// TestDialEndsWithTheContext: a broker that accepts the TCP connection and
// then says nothing (a frozen server, or RabbitMQ delaying a refused
// login) holds Connect, and Publish, only until their context ends: the
// relay's shutdown waited for the dial's own timeout (ConfirmTimeout, 30 s).
func TestDialEndsWithTheContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, silent
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	pub, err := amqp.NewPublisher(amqp.Config{URL: "amqp://guest:guest@" + ln.Addr().String() + "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- pub.Connect(ctx) }()
	c := <-accepted // the dial reached the server, which stays silent
	accepted <- c
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Connect after its context was cancelled = %v, want context.Canceled", err)
	}

	// Publish: the message's context ends the dial.
	mctx, mcancel := context.WithCancel(context.Background())
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.SetContext(mctx)
	go func() { errc <- pub.Publish("orders", msg) }()
	c = <-accepted
	accepted <- c
	mcancel()
	select {
	case err := <-errc:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish after its message's context was cancelled = %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(20 * time.Second): // the dial's own timeout is 30 s
		t.Fatal("Publish still dialling 20 s after its message's context was cancelled")
	}
}
