package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"github.com/gooutbox/outbox/adapters/internal/fence"
)

// ErrFenced is what a connection of a [Publisher] returns for a produce
// request it refuses to write: the Publish call the request belongs to has
// ended (its messages' context was cancelled or passed its deadline), so
// the relay that made it may have lost its lease, and another relay may
// already be publishing the same aggregates (see Fencing on [Publisher]).
// Publish wraps it when it is the reason a write failed.
var ErrFenced = fence.ErrFenced

// apiKeyProduce is the Kafka protocol's request api_key of Produce.
const apiKeyProduce = 0

// classifyRequest reads a Kafka request frame's header: a 4-byte size,
// then the api_key (2 bytes). Produce requests publish.
func classifyRequest(b []byte) (length int, publishes bool, ok bool) {
	if len(b) < 6 {
		return 0, false, false
	}
	return 4 + int(int32(binary.BigEndian.Uint32(b))), binary.BigEndian.Uint16(b[4:]) == apiKeyProduce, true
}

// newGate returns a gate for Kafka's request frames.
func newGate() *fence.Gate { return fence.NewGate(classifyRequest) }

// fencedDialer wraps dial (nil: a net.Dialer's) so that its connections
// pass through g, with tlsConfig's TLS on top of the raw connection when
// not nil: the gate must see the protocol's frames, so it takes TLS over
// from kafka-go's Transport.
func fencedDialer(g *fence.Gate, dial func(context.Context, string, string) (net.Conn, error), tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	if dial == nil {
		d := &net.Dialer{Timeout: 3 * time.Second}
		dial = d.DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		if g.Closed() {
			return nil, ErrFenced
		}
		raw, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		conn := raw
		if tlsConfig != nil {
			cfg := tlsConfig
			if cfg.ServerName == "" {
				cfg = cfg.Clone()
				cfg.ServerName, _, _ = net.SplitHostPort(address)
			}
			tc := tls.Client(raw, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = raw.Close()
				return nil, fmt.Errorf("kafka: TLS handshake with %s: %w", address, err)
			}
			conn = tc
		}
		return g.Wrap(conn, raw)
	}
}
