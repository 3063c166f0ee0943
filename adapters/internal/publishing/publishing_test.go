package publishing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

type key struct{}

func TestContextEndsWithAnyMessage(t *testing.T) {
	a, b := message.NewMessage("a", nil), message.NewMessage("b", nil)
	actx, acancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer acancel()
	bctx, bcancel := context.WithCancelCause(context.Background())
	a.SetContext(actx)
	b.SetContext(bctx)
	ctx, done := Context([]*message.Message{a, b}, 0, nil)
	defer done()
	if ctx.Value(key{}) != "v" {
		t.Error("the first message's values are lost")
	}
	if ctx.Err() != nil {
		t.Fatal("done before any message context ended")
	}
	stop := errors.New("batch deadline")
	bcancel(stop)
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), stop) {
		t.Errorf("cause %v, want %v", context.Cause(ctx), stop)
	}
}

func TestContextAlreadyDone(t *testing.T) {
	m := message.NewMessage("a", nil)
	mctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.SetContext(mctx)
	ctx, done := Context([]*message.Message{message.NewMessage("z", nil), m}, 0, nil)
	defer done()
	if ctx.Err() == nil {
		t.Error("not done although a message's context is")
	}
}

func TestContextTimeout(t *testing.T) {
	cause := errors.New("confirm timeout")
	ctx, done := Context([]*message.Message{message.NewMessage("a", nil)}, time.Millisecond, cause)
	defer done()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), cause) {
		t.Errorf("cause %v, want %v", context.Cause(ctx), cause)
	}
}

func TestAggregateKey(t *testing.T) {
	m := message.NewMessage("a", nil)
	if AggregateKey(m) != "" {
		t.Error("a message without aggregate_id has a key")
	}
	m.Metadata.Set(runtime.MetadataAggregateType, "order")
	m.Metadata.Set(runtime.MetadataAggregateID, "1")
	n := message.NewMessage("b", nil)
	n.Metadata.Set(runtime.MetadataAggregateType, "invoice")
	n.Metadata.Set(runtime.MetadataAggregateID, "1")
	if AggregateKey(m) == AggregateKey(n) {
		t.Error("aggregates of two types with one id share a key")
	}
}

func TestContextHasDeadline(t *testing.T) {
	ctx, done := Context([]*message.Message{message.NewMessage("a", nil)}, time.Minute, nil)
	defer done()
	if _, ok := ctx.Deadline(); !ok {
		t.Error("no deadline: clients that set connection deadlines from it would wait forever")
	}
}

// TestDeadLetteredAtIsTheConsumers: DedupID reads the key runtime/consumer
// sets on a dead letter.
func TestDeadLetteredAtIsTheConsumers(t *testing.T) {
	if DeadLetteredAt != consumer.MetadataDeadLetterAt {
		t.Fatalf("DeadLetteredAt = %q, consumer.MetadataDeadLetterAt = %q", DeadLetteredAt, consumer.MetadataDeadLetterAt)
	}
	msg := message.NewMessage("0197d1c2-5a8e-7c1b-9f3e-2d4b6a8c0e11", nil)
	if got := DedupID(msg); got != msg.UUID {
		t.Errorf("DedupID of an event = %q, want its UUID", got)
	}
	msg.Metadata.Set(consumer.MetadataDeadLetterAt, "2026-12-03T10:20:00Z")
	if got, want := DedupID(msg), msg.UUID+"/dlq/2026-12-03T10:20:00Z"; got != want {
		t.Errorf("DedupID of a dead letter = %q, want %q", got, want)
	}
}

// TestDedupIDRoundTrip: a re-drive's deduplication id differs from its
// event's, the same re-drive's is the same, and UUIDOfDedupID gives both
// their UUID back; other ids pass through.
func TestDedupIDRoundTrip(t *testing.T) {
	msg := message.NewMessage("01a23c30-0f57-78d6-893b-298bc8890b0d", nil)
	plain := DedupID(msg)
	redrive := msg.Copy()
	redrive.Metadata.Set(DeadLetteredAt, "2026-12-03T10:20:00Z")
	if plain != msg.UUID || DedupID(redrive) == plain || DedupID(redrive) != DedupID(redrive.Copy()) {
		t.Errorf("DedupID: event %q, re-drive %q", plain, DedupID(redrive))
	}
	for _, id := range []string{plain, DedupID(redrive)} {
		if got := UUIDOfDedupID(id); got != msg.UUID {
			t.Errorf("UUIDOfDedupID(%q) = %q, want %q", id, got, msg.UUID)
		}
	}
	for _, id := range []string{"", "sha256-00ff", "/dlq/x"} {
		if got := UUIDOfDedupID(id); got != id {
			t.Errorf("UUIDOfDedupID(%q) = %q, want it unchanged", id, got)
		}
	}
}

func TestClassify(t *testing.T) {
	isEOF := func(err error) bool { return errors.Is(err, io.EOF) }
	if err := Classify(fmt.Errorf("publish: %w", io.EOF), isEOF); !runtime.IsTransient(err) {
		t.Errorf("Classify(EOF) = %v, want transient", err)
	}
	if err := Classify(errors.New("boom"), isEOF); runtime.IsTransient(err) {
		t.Errorf("Classify(boom) = %v, want not transient", err)
	}
	if err := Classify(runtime.Permanent(io.EOF), isEOF); runtime.IsTransient(err) || !runtime.IsPermanent(err) {
		t.Errorf("Classify(permanent EOF) = %v, want permanent", err)
	}
	per := runtime.PublishErrors{nil, io.EOF, errors.New("boom")}
	err := Classify(fmt.Errorf("publish: %w", per), isEOF)
	var got runtime.PublishErrors
	if !errors.As(err, &got) || got[0] != nil || !runtime.IsTransient(got[1]) || runtime.IsTransient(got[2]) {
		t.Errorf("Classify(PublishErrors) = %#v, want only the EOF transient", got)
	}
	if !ConnectionLost(&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}) || ConnectionLost(errors.New("boom")) {
		t.Error("ConnectionLost misclassifies")
	}
}
