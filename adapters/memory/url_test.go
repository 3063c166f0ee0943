package memory_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/adaptertest"
	"github.com/gooutbox/outbox/adapters/broker"
	_ "github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func TestOpenMemory(t *testing.T) {
	b, err := broker.Open(context.Background(), "memory://", broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if got, want := b.Guarantees(), (broker.Guarantees{OrderPerAggregate: true}); got != want {
		t.Errorf("Guarantees() = %+v, want %+v", got, want)
	}
	adaptertest.RoundTrip(t, b, "orders")
}

func TestOpenMemoryBadParameters(t *testing.T) {
	for _, u := range []string{
		"memory://?nope=1",
		"memory://?max_messages_per_topic=-1",
		"memory://?max_messages_per_topic=x",
		"memory://host",
		"memory:///path",
	} {
		t.Run(u, func(t *testing.T) {
			b, err := broker.Open(context.Background(), u, broker.Config{})
			if !errors.Is(err, broker.ErrInvalidURL) {
				if b != nil {
					b.Close()
				}
				t.Fatalf("Open(%q) = %v, want ErrInvalidURL", u, err)
			}
		})
	}
}

// TestOpenPassesLogger checks that broker.Config.Logger reaches the adapter
// Open builds: the memory adapter logs a nacked message's redelivery (at
// Watermill's trace level) to it.
func TestOpenPassesLogger(t *testing.T) {
	var buf runtimetest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: watermill.LevelTrace}))
	b, err := broker.Open(context.Background(), "memory://", broker.Config{Logger: logger})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	sub, err := b.Subscriber("g1")
	if err != nil {
		t.Fatalf("Subscriber: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, "topic")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if err := b.Publisher().Publish("topic", msg); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for i := range 2 {
		select {
		case got := <-ch:
			if i == 0 {
				got.Nack()
			} else {
				got.Ack()
			}
		case <-ctx.Done():
			t.Fatalf("delivery %d: %v", i+1, ctx.Err())
		}
	}
	out := buf.String()
	for _, want := range []string{`msg="memory: message nacked, sending it again"`, "topic=topic", "message_uuid=" + msg.UUID} {
		if !strings.Contains(out, want) {
			t.Errorf("log output lacks %q; got:\n%s", want, out)
		}
	}
}
