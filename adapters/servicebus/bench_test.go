package servicebus_test

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/servicebus"
	"github.com/gooutbox/outbox/adapters/servicebus/servicebustest"
)

// BenchmarkPublish publishes Publish calls of 100 events of 236-byte
// payloads over 10 sessions, as the relay sends them, through the adapter
// (mapping, the SDK's message batches, per-message errors) to the
// in-process fake of package servicebustest. It measures the adapter's own
// cost, not the service's: no network is involved. It reports events/s.
//
//	go test -run '^$' -bench . ./adapters/servicebus/
func BenchmarkPublish(b *testing.B) {
	ns := servicebustest.New()
	ns.CreateQueue("orders")
	p, err := servicebus.NewPublisher(servicebus.PublisherConfig{Client: ns, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	payload := `{"data":"` + strings.Repeat("x", 236-11) + `"}`
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		msgs := make([]*message.Message, 100)
		for i := range msgs {
			msgs[i] = event(string(rune('a'+i%10)), i, payload)
		}
		b.StartTimer()
		if err := p.Publish("orders", msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}
