package nats

import (
	"context"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// defaultReconnectWait is the default of [PublisherConfig.ReconnectWait] and
// [SubscriberConfig.ReconnectWait]: nats.go's own.
const defaultReconnectWait = natsgo.DefaultReconnectWait

// connect returns conn, or a new connection to url when conn is nil (owned
// reports which). A new connection reconnects for ever, reconnectWait
// apart, unless opts say otherwise (they are applied after).
func connect(conn *natsgo.Conn, url string, reconnectWait time.Duration, opts []natsgo.Option) (nc *natsgo.Conn, owned bool, err error) {
	if conn != nil {
		return conn, false, nil
	}
	opts = append([]natsgo.Option{
		// nats.go gives up after 60 attempts (2 minutes with its 2s wait)
		// and closes the connection for good: every later publish or fetch
		// would fail until the process restarts.
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(reconnectWait),
	}, opts...)
	nc, err = natsgo.Connect(url, opts...)
	if err != nil {
		return nil, false, fmt.Errorf("nats: connect to %s: %w", url, err)
	}
	return nc, true, nil
}

// connErr returns the error of using a connection whose status is s, or
// nil when s is CONNECTED. All of them are retryable.
func connErr(s natsgo.Status) error {
	switch s {
	case natsgo.CONNECTED:
		return nil
	case natsgo.RECONNECTING:
		return natsgo.ErrConnectionReconnecting
	case natsgo.CLOSED:
		return natsgo.ErrConnectionClosed
	case natsgo.DRAINING_SUBS, natsgo.DRAINING_PUBS:
		return natsgo.ErrConnectionDraining
	default:
		return natsgo.ErrDisconnected
	}
}

// whileConnected returns a context derived from ctx that is cancelled when
// nc stops being connected (it lost the server, or is closed or draining),
// with [connErr] of its new status as the cause. When nc is not connected
// now, it returns that error instead. Call stop when done: it ends the
// watch (and its goroutine).
//
// A request or a publish made on a reconnecting connection is kept in
// nats.go's reconnect buffer and answered, if at all, only after the
// reconnect; its reply subscription may miss the answer. Failing instead
// lets the caller retry on its own schedule.
func whileConnected(ctx context.Context, nc *natsgo.Conn) (_ context.Context, stop func(), err error) {
	lost := nc.StatusChanged(natsgo.DISCONNECTED, natsgo.RECONNECTING, natsgo.CLOSED,
		natsgo.DRAINING_SUBS, natsgo.DRAINING_PUBS)
	if err := connErr(nc.Status()); err != nil {
		nc.RemoveStatusListener(lost)
		return nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		// The channel is closed by RemoveStatusListener in stop.
		if s, ok := <-lost; ok {
			cancel(connErr(s))
		}
	}()
	return ctx, func() {
		nc.RemoveStatusListener(lost)
		cancel(context.Canceled)
	}, nil
}
