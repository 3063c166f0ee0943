package kafkatest_test

import (
	"fmt"
	"log"

	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// ExampleStart runs an in-process cluster, as a demo's main function would.
func ExampleStart() {
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	fmt.Println("brokers:", len(cluster.Addrs()))
	// Output: brokers: 1
}
