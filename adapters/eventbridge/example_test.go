package eventbridge_test

import (
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/gooutbox/outbox/adapters/eventbridge"
	"github.com/gooutbox/outbox/adapters/eventbridge/eventbridgetest"
)

// ExamplePublisher publishes an event to a custom bus, here on the
// in-process endpoint; on AWS, leave Endpoint and AWSConfig out (the SDK's
// default chain gives the region and the credentials).
func ExamplePublisher() {
	srv, err := eventbridgetest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	srv.CreateEventBus("shop")

	awsCfg := aws.Config{Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	pub, err := eventbridge.NewPublisher(eventbridge.PublisherConfig{
		EventBus:  "shop",
		Endpoint:  srv.URL(),
		AWSConfig: &awsCfg,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()

	m := message.NewMessage("01a24bca-0000-7000-8000-000000000001", []byte(`{"amount":"10.00"}`))
	m.Metadata.Set("event_type", "orders.order_paid")
	m.Metadata.Set("aggregate_type", "order")
	m.Metadata.Set("aggregate_id", "42")
	if err := pub.Publish("order", m); err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range srv.Events() {
		fmt.Println(e.EventBus, e.Source, e.DetailType)
		fmt.Println(e.Detail)
	}
	// Output:
	// shop order orders.order_paid
	// {"id":"01a24bca-0000-7000-8000-000000000001","type":"orders.order_paid","aggregate_type":"order","aggregate_id":"42","topic":"order","metadata":{"aggregate_id":"42","aggregate_type":"order","event_type":"orders.order_paid"},"data":{"amount":"10.00"}}
}
