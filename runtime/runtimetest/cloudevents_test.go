package runtimetest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestCheckCloudEventDefaultPrefix: an empty prefix is the default,
// runtime.CloudEventsPrefixKafka (ce_), as it is for runtime.CloudEvents.
// It took every key as an attribute: content-type and traceparent were bad
// attribute names, and id, source, specversion and type were missing.
func TestCheckCloudEventDefaultPrefix(t *testing.T) {
	env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: "orders.order_placed", EventVersion: 2,
		AggregateType: "order", AggregateID: "o-1", OccurredAt: time.Now(),
		Headers: map[string]string{runtime.MetadataTraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	md := runtime.CloudEvents{Source: "/orders"}.Metadata(env) // its Prefix "" is ce_ too
	for _, prefix := range []string{"", runtime.CloudEventsPrefixKafka} {
		if err := runtimetest.CheckCloudEvent(md, prefix); err != nil {
			t.Errorf("CheckCloudEvent(runtime.CloudEvents{}.Metadata(env), %q) = %v, want nil", prefix, err)
		}
	}

	// The default applies to the checks too: errors name ce_ keys, and
	// ce_datacontenttype is refused as under the Kafka binding.
	delete(md, "ce_source")
	md["ce_datacontenttype"] = "application/json"
	err := runtimetest.CheckCloudEvent(md, "")
	for _, want := range []string{"required attribute ce_source is missing", "not as ce_datacontenttype"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckCloudEvent(md without ce_source, with ce_datacontenttype, \"\") = %v, want an error saying %q", err, want)
		}
	}
	if err := runtimetest.CheckCloudEvent(md, runtime.CloudEventsPrefixHTTP); err == nil || !strings.Contains(err.Error(), "ce-source") {
		t.Errorf("CheckCloudEvent(md, %q) = %v, want the ce- attributes missing", runtime.CloudEventsPrefixHTTP, err)
	}
}
