package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gooutbox/outbox/adapters/internal/fence"
)

// frame is a request frame of the Kafka protocol: a 4-byte size, then the
// api_key and body bytes.
func frame(apiKey uint16, body int) []byte {
	b := make([]byte, 6+body)
	binary.BigEndian.PutUint32(b, uint32(2+body))
	binary.BigEndian.PutUint16(b[4:], apiKey)
	return b
}

// fencedPair returns a connection dialed through g and the peer's end,
// which a goroutine reads into got until it ends.
func fencedPair(t *testing.T, g *fence.Gate) (net.Conn, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := fencedDialer(g, nil, nil)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		defer peer.Close()
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	return conn, got
}

func TestFencedConnLetsOnlyProduceThroughBeforeTheDeadline(t *testing.T) {
	now := time.Now()
	metadata, produce := frame(3, 10), frame(apiKeyProduce, 20)
	tests := []struct {
		name   string
		writes [][]byte
		at     []time.Time // the gate's clock at each write
		wantOK []bool
		want   int // bytes the peer receives
	}{
		{"produce before the deadline", [][]byte{produce}, []time.Time{now}, []bool{true}, len(produce)},
		{"metadata after the deadline", [][]byte{metadata}, []time.Time{now.Add(time.Hour)}, []bool{true}, len(metadata)},
		{"produce after the deadline", [][]byte{metadata, produce}, []time.Time{now.Add(time.Hour), now.Add(time.Hour)}, []bool{true, false}, len(metadata)},
		{"metadata and produce in one write after the deadline", [][]byte{append(append([]byte(nil), metadata...), produce...)},
			[]time.Time{now.Add(time.Hour)}, []bool{false}, 0},
		{"a header split before its api_key", [][]byte{produce[:3], produce[3:]}, []time.Time{now.Add(time.Hour), now.Add(time.Hour)}, []bool{false, false}, 0},
		{"produce cut by the deadline", [][]byte{produce[:10], produce[10:]}, []time.Time{now, now.Add(time.Hour)}, []bool{true, false}, 10},
		{"metadata after a produce", [][]byte{produce, metadata}, []time.Time{now, now.Add(time.Hour)}, []bool{true, true}, len(produce) + len(metadata)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Minute))
			defer cancel()
			g.Begin(ctx)
			conn, got := fencedPair(t, g)
			for i, w := range tt.writes {
				g.SetClock(func() time.Time { return tt.at[i] })
				_, err := conn.Write(w)
				if ok := err == nil; ok != tt.wantOK[i] {
					t.Fatalf("write %d: err = %v, want ok=%v", i, err, tt.wantOK[i])
				}
				if err != nil && !errors.Is(err, ErrFenced) {
					t.Fatalf("write %d: err = %v, want ErrFenced", i, err)
				}
			}
			_ = conn.Close()
			if b := <-got; len(b) != tt.want {
				t.Errorf("the peer received %d bytes, want %d", len(b), tt.want)
			}
		})
	}
}

func TestClosedGateRefusesDialsAndAbortsConnections(t *testing.T) {
	g := newGate()
	defer g.Begin(context.Background())() // no deadline: only closing fences
	conn, got := fencedPair(t, g)
	g.Close()
	if _, err := conn.Write(frame(3, 1)); !errors.Is(err, ErrFenced) {
		t.Errorf("write on a retired gate's connection: %v, want ErrFenced", err)
	}
	<-got
	if _, err := fencedDialer(g, nil, nil)(context.Background(), "tcp", "127.0.0.1:1"); !errors.Is(err, ErrFenced) {
		t.Errorf("dial through a retired gate: %v, want ErrFenced", err)
	}
}
