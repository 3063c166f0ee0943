package fence

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// classifyTest reads frames of a 4-byte size and a 2-byte kind; kind 0
// publishes.
func classifyTest(b []byte) (int, bool, bool) {
	if len(b) < 6 {
		return 0, false, false
	}
	return 4 + int(binary.BigEndian.Uint32(b)), binary.BigEndian.Uint16(b[4:]) == 0, true
}

func testFrame(kind uint16, body int) []byte {
	b := make([]byte, 6+body)
	binary.BigEndian.PutUint32(b, uint32(2+body))
	binary.BigEndian.PutUint16(b[4:], kind)
	return b
}

// TestFeedFlagsEveryPublishingByte feeds streams of frames cut at random
// places and checks that a piece is flagged whenever it holds a byte of a
// publishing frame (safety), and never when it holds only bytes of other
// frames whose header was complete before the piece or is in it (so other
// traffic is not fenced).
func TestFeedFlagsEveryPublishingByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var stream []byte
		var publishing []bool // per byte of stream
		var hdrEnd []int      // per byte: the offset where its frame's header ends
		for range 1 + rng.IntN(6) {
			kind := uint16(rng.IntN(3))
			f := testFrame(kind, rng.IntN(20))
			start := len(stream)
			stream = append(stream, f...)
			for range f {
				publishing = append(publishing, kind == 0)
				hdrEnd = append(hdrEnd, start+6)
			}
		}
		var f frames
		for off := 0; off < len(stream); {
			n := 1 + rng.IntN(len(stream)-off)
			piece := stream[off : off+n]
			got := f.feed(piece, classifyTest)
			want, mayFlag := false, false
			for i := off; i < off+n; i++ {
				want = want || publishing[i]
				mayFlag = mayFlag || hdrEnd[i] > off+n // its header is not complete yet
			}
			if want && !got {
				t.Fatalf("stream %x: piece [%d, %d) holds publishing bytes and was not flagged", stream, off, off+n)
			}
			if got && !want && !mayFlag {
				t.Fatalf("stream %x: piece [%d, %d) holds no publishing byte and was flagged", stream, off, off+n)
			}
			off += n
		}
	}
}

func TestGateRefusesLatePublishingAndAbortsOnClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- len(b)
	}()
	g := NewGate(classifyTest)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end := g.Begin(ctx)
	c, err := g.Wrap(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, other := testFrame(0, 3), testFrame(1, 3)
	if _, err := c.Write(pub); err != nil {
		t.Fatalf("publishing before the deadline: %v", err)
	}
	if g.Abandoned() {
		t.Error("Abandoned with a live call")
	}
	cancel()
	if !g.Abandoned() {
		t.Error("not Abandoned after the call's context ended")
	}
	end()
	g.SetClock(func() time.Time { return time.Now().Add(time.Hour) })
	if _, err := c.Write(other); err != nil {
		t.Fatalf("a frame that does not publish, after the deadline: %v", err)
	}
	if _, err := c.Write(pub); !errors.Is(err, ErrFenced) {
		t.Fatalf("publishing after the deadline: %v, want ErrFenced", err)
	}
	if n := <-got; n != len(pub)+len(other) {
		t.Errorf("the peer received %d bytes, want %d", n, len(pub)+len(other))
	}
	g.Close()
	if _, err := g.Wrap(raw, nil); !errors.Is(err, ErrFenced) {
		t.Errorf("Wrap on a closed gate: %v, want ErrFenced", err)
	}
}
