package kafka_test

import (
	"crypto/tls"
	"fmt"
	"log"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
)

// ExampleNewPublisher shows the escape hatch for the kafka-go Writer
// settings the config does not expose, here TLS and a client id.
func ExampleNewPublisher() {
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: []string{"broker-1.example.com:9093"},
		OverwriteWriter: func(w *kafkago.Writer) {
			w.Transport = &kafkago.Transport{
				ClientID: "orders-relay",
				TLS:      &tls.Config{MinVersion: tls.VersionTLS12},
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	fmt.Println("publisher ready")
	// Output: publisher ready
}
