package eventbridge_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseb "github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/gooutbox/outbox/adapters/eventbridge"
	"github.com/gooutbox/outbox/adapters/eventbridge/eventbridgetest"
	"github.com/gooutbox/outbox/runtime"
)

// BenchmarkPublish publishes Publish calls of 100 events of 236-byte
// payloads, as the relay sends them, through the SDK's HTTP client to the
// in-process fake (or the endpoint of OUTBOX_TEST_EVENTBRIDGE_ENDPOINT), in
// requests of 10 entries. It reports events/s.
//
//	go test -run '^$' -bench . ./adapters/eventbridge/
func BenchmarkPublish(b *testing.B) {
	endpoint, _ := eventbridgetest.Endpoint(b)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	client := awseb.NewFromConfig(cfg, func(o *awseb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	p, err := eventbridge.NewPublisher(eventbridge.PublisherConfig{Client: client, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	payload := `{"data":"` + strings.Repeat("x", 236-11) + `"}`
	msgs := make([]*message.Message, 100)
	for i := range msgs {
		env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: "orders.order_paid", EventVersion: 1,
			AggregateType: "order", AggregateID: "agg", Payload: []byte(payload)}
		msgs[i] = message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
		for k, v := range env.Metadata() {
			msgs[i].Metadata.Set(k, v)
		}
	}
	b.ResetTimer()
	for range b.N {
		if err := p.Publish("orders", msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "events/s")
}
