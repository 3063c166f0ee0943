package sqs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/sqs"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
)

// Publish to an SQS FIFO queue and read the message back, against the
// in-process fake (set Endpoint to "" and Region to yours for AWS).
func Example() {
	srv, err := sqstest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	awsCfg := sqstest.AWSConfig()
	client := sqs.ClientConfig{Endpoint: srv.URL(), AWSConfig: &awsCfg}

	pub, err := sqs.NewPublisher(sqs.PublisherConfig{AWS: client, CreateQueue: true})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":42}`))
	msg.Metadata.Set("aggregate_id", "order-42") // the message group
	if err := pub.Publish("orders.created", msg); err != nil {
		log.Fatal(err)
	}

	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{AWS: client})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "orders.created")
	if err != nil {
		log.Fatal(err)
	}
	got := <-ch
	got.Ack()
	fmt.Println(string(got.Payload), got.UUID == msg.UUID)
	// Output: {"order":42} true
}

// Fan out through an SNS FIFO topic: each consumer group reads its own
// queue, created and subscribed by the subscriber.
func ExampleSNSPublisher() {
	srv, err := sqstest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	awsCfg := sqstest.AWSConfig()
	client := sqs.ClientConfig{Endpoint: srv.URL(), AWSConfig: &awsCfg}

	var chans []<-chan *message.Message
	for _, group := range []string{"billing", "shipping"} {
		// WaitTime: Close waits for a receive in flight, up to the long
		// poll (20s by default), so that SQS does not hide what it hands
		// out to nobody.
		sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{AWS: client, ConsumerGroup: group, CreateQueue: true, WaitTime: time.Second})
		if err != nil {
			log.Fatal(err)
		}
		defer sub.Close()
		ch, err := sub.Subscribe(context.Background(), "orders")
		if err != nil {
			log.Fatal(err)
		}
		chans = append(chans, ch)
	}
	pub, err := sqs.NewSNSPublisher(sqs.SNSPublisherConfig{AWS: client})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(`{"order":7}`))); err != nil {
		log.Fatal(err)
	}
	for _, ch := range chans {
		m := <-ch
		m.Ack()
		fmt.Println(string(m.Payload))
	}
	// Output:
	// {"order":7}
	// {"order":7}
}

func ExampleQueueName() {
	name, _ := sqs.QueueName("orders.created")
	fmt.Println(name)
	// Output: orders_created.fifo
}
