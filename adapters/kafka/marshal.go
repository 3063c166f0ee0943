package kafka

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/runtime"
)

// AggregateIDKey is the default [PublisherConfig.Key]: the message's
// aggregate_id metadata ([runtime.MetadataAggregateID]) or, for a CloudEvent,
// its partitionkey attribute ([runtime.AggregateOf]; the Kafka binding maps
// partitionkey to the record key), or a nil key when the message has none or
// it is empty. kafka.Hash spreads nil-keyed records round robin over the
// partitions, so such messages have no ordering guarantee.
func AggregateIDKey(topic string, msg *message.Message) ([]byte, error) {
	if _, id := runtime.AggregateOf(msg.Metadata); id != "" {
		return []byte(id), nil
	}
	return nil, nil
}

// toRecord converts msg into a Kafka record: the payload is the value, every
// metadata entry is a header (sorted by name, so records are deterministic),
// and the message UUID is the event_id header unless the metadata already
// carries a non-empty one or is a CloudEvent (a ce_id header: the relay's
// CloudEvents records then carry the binding's headers only).
func toRecord(topic string, msg *message.Message, key []byte) kafka.Message {
	headers := make([]kafka.Header, 0, len(msg.Metadata)+1)
	for k, v := range msg.Metadata {
		if k == runtime.MetadataEventID && v == "" {
			continue // replaced by the UUID below
		}
		headers = append(headers, kafka.Header{Key: k, Value: []byte(v)})
	}
	if msg.Metadata.Get(runtime.MetadataEventID) == "" && msg.Metadata.Get(ceID) == "" && msg.UUID != "" {
		headers = append(headers, kafka.Header{Key: runtime.MetadataEventID, Value: []byte(msg.UUID)})
	}
	slices.SortFunc(headers, func(a, b kafka.Header) int { return strings.Compare(a.Key, b.Key) })
	return kafka.Message{
		Topic:   topic,
		Key:     key,
		Value:   msg.Payload,
		Headers: headers,
	}
}

// fromRecord converts a Kafka record into a Watermill message. Every header
// becomes metadata (the last one wins when a name repeats). A CloudEvent
// (a ce_specversion header) without a ce_partitionkey header gets the
// record's key as its partitionkey: the Kafka binding maps the attribute to
// the key, so other producers may send it there only. The UUID is the
// event_id header, else the ce_id header (a CloudEvent); a record without
// either (written by another producer) gets a name-based UUID (version 5,
// URL namespace, name "kafka:topic/partition/offset"), which is stable
// across redeliveries so consumers can still deduplicate on it.
func fromRecord(r kafka.Message) *message.Message {
	md := make(message.Metadata, len(r.Headers))
	for _, h := range r.Headers {
		md[h.Key] = string(h.Value)
	}
	if len(r.Key) > 0 && md[ceSpecVersion] != "" && md[cePartitionKey] == "" {
		md[cePartitionKey] = string(r.Key)
	}
	id := md[runtime.MetadataEventID]
	if id == "" {
		id = md[ceID]
	}
	if id == "" {
		id = uuid.NewSHA1(uuid.NameSpaceURL, []byte("kafka:"+recordName(r))).String()
	}
	msg := message.NewMessage(id, r.Value)
	msg.Metadata = md
	return msg
}

// The CloudEvents attributes fromRecord reads, under the Kafka binding's
// prefix.
const (
	ceID           = runtime.CloudEventsPrefixKafka + runtime.CEID
	ceSpecVersion  = runtime.CloudEventsPrefixKafka + runtime.CESpecVersion
	cePartitionKey = runtime.CloudEventsPrefixKafka + runtime.CEPartitionKey
)

// recordName names a record by its position: "topic/partition/offset".
func recordName(r kafka.Message) string {
	return r.Topic + "/" + strconv.Itoa(r.Partition) + "/" + strconv.FormatInt(r.Offset, 10)
}

// keyError reports a failing [PublisherConfig.Key] function.
func keyError(topic string, msg *message.Message, err error) error {
	return fmt.Errorf("kafka: key of message %s for topic %q: %w", msg.UUID, topic, err)
}
