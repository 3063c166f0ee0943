package runtime_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

func ExampleCloudEvents_Metadata() {
	ce := runtime.CloudEvents{Source: "/orders-service", DataSchemaBase: "https://schemas.example.com/outbox"}
	if err := ce.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	env := runtime.Envelope{
		EventID:       uuid.MustParse("0190f5a4-0000-7000-8000-000000000001"),
		EventType:     "orders.order_placed",
		EventVersion:  2,
		AggregateType: "order",
		AggregateID:   "42",
		OccurredAt:    time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Payload:       []byte(`{"event_version":2}`),
	}
	md := ce.Metadata(env)
	for _, k := range slices.Sorted(maps.Keys(md)) {
		fmt.Printf("%s: %s\n", k, md[k])
	}

	// A consumer rebuilds the envelope from the attributes.
	back, err := runtime.EnvelopeFromMetadata("", md, env.Payload)
	fmt.Println(back.EventID, back.Key(), back.AggregateID, err)
	// Output:
	// ce_aggregatetype: order
	// ce_dataschema: https://schemas.example.com/outbox/orders.order_placed/v2.schema.json
	// ce_eventversion: 2
	// ce_id: 0190f5a4-0000-7000-8000-000000000001
	// ce_partitionkey: 42
	// ce_source: /orders-service
	// ce_specversion: 1.0
	// ce_time: 2025-01-02T03:04:05Z
	// ce_type: orders.order_placed
	// content-type: application/json
	// 0190f5a4-0000-7000-8000-000000000001 orders.order_placed v2 42 <nil>
}

func ExampleAggregateOf() {
	native := map[string]string{runtime.MetadataAggregateType: "order", runtime.MetadataAggregateID: "42"}
	ce := map[string]string{"ce_specversion": "1.0", "ce_aggregatetype": "order", "ce_partitionkey": "43"}
	fmt.Println(runtime.AggregateOf(native))
	fmt.Println(runtime.AggregateOf(ce))
	// Output:
	// order 42
	// order 43
}
