package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// BenchmarkNewEnvelope measures what the hooks pay per recorded event before
// the insert: validation, the JSON payload and the envelope.
//
//	go test -run '^$' -bench Envelope -benchmem ./runtime/
func BenchmarkNewEnvelope(b *testing.B) {
	ctx := context.Background()
	id := runtime.NewEventID()
	evt := OrderPlaced{EventVersion: 1, OccurredAt: time.Now(), Total: "12.50"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runtime.NewEnvelope(ctx, id, evt, "order", "42"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnvelopeMetadataRoundTrip measures the wire contract's two
// directions per message: the metadata the relay publishes, and the
// envelope the consumer reads back from it.
func BenchmarkEnvelopeMetadataRoundTrip(b *testing.B) {
	env, err := runtime.NewEnvelope(context.Background(), runtime.NewEventID(), OrderPlaced{EventVersion: 1, OccurredAt: time.Now(), Total: "12.50"}, "order", "42")
	if err != nil {
		b.Fatal(err)
	}
	uuid := env.EventID.String()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runtime.EnvelopeFromMetadata(uuid, env.Metadata(), env.Payload); err != nil {
			b.Fatal(err)
		}
	}
}
