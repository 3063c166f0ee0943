package amqp

import (
	"fmt"
	"strconv"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Marshaler is watermill-amqp's DefaultMarshaler (the UUID in the
// _watermill_message_uuid header, metadata as string headers, persistent
// delivery unless NotPersistentDeliveryMode), with an Unmarshal that also
// accepts headers that are not strings. The broker adds some: a quorum
// queue sets x-delivery-count (an integer) on every redelivery, dead
// lettering sets x-death (a table). DefaultMarshaler fails on them, and
// watermill-amqp's subscriber then nacks the message and gets it back
// forever; Marshaler turns them into metadata strings instead (integers in
// decimal, other values as fmt.Sprint prints them).
//
// It is the default [Config.Marshaler].
type Marshaler struct {
	wamqp.DefaultMarshaler
}

var _ wamqp.Marshaler = Marshaler{}

// Unmarshal converts the delivery's non-string headers to strings and
// unmarshals it with DefaultMarshaler. The message UUID header is left as
// it is.
func (m Marshaler) Unmarshal(d amqp091.Delivery) (*message.Message, error) {
	uuidKey := m.MessageUUIDHeaderKey
	if uuidKey == "" {
		uuidKey = wamqp.DefaultMessageUUIDHeaderKey
	}
	var headers amqp091.Table
	for k, v := range d.Headers {
		if _, ok := v.(string); ok || k == uuidKey {
			continue
		}
		if headers == nil {
			headers = make(amqp091.Table, len(d.Headers))
			for k2, v2 := range d.Headers {
				headers[k2] = v2
			}
		}
		headers[k] = headerString(v)
	}
	if headers != nil {
		d.Headers = headers
	}
	return m.DefaultMarshaler.Unmarshal(d)
}

// headerString renders an AMQP header value as metadata.
func headerString(v any) string {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int16:
		return strconv.FormatInt(int64(v), 10)
	case int8:
		return strconv.FormatInt(int64(v), 10)
	case int:
		return strconv.Itoa(v)
	case []byte:
		return string(v)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
