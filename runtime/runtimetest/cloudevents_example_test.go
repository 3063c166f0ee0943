package runtimetest_test

import (
	"fmt"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

func ExampleCheckCloudEvent() {
	md := map[string]string{
		"ce_specversion": "1.0",
		"ce_id":          "0190f5a4-0000-7000-8000-000000000001",
		"ce_type":        "orders.order_placed",
		"ce_time":        "2025-01-02 03:04:05",
		"ce_Custom":      "x",
	}
	fmt.Println(runtimetest.CheckCloudEvent(md, runtime.CloudEventsPrefixKafka) != nil)
	md["ce_source"] = "/orders-service"
	md["ce_time"] = "2025-01-02T03:04:05Z"
	delete(md, "ce_Custom")
	fmt.Println(runtimetest.CheckCloudEvent(md, runtime.CloudEventsPrefixKafka))
	// Output:
	// true
	// <nil>
}
