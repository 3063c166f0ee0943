package nats

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers the package's URL schemes with package adapters/broker,
// so that importing the package is all broker.Open needs.
func init() {
	broker.Register("nats", openNATS)
}

// openNATS opens nats://[user:pass@]host:port[,host:port...] (NATS with
// JetStream). Parameters:
//
//	dedup_window=D   duplicate window of created streams, a Go duration
//	                 (default 10m); must exceed the relay's longest retry
//	                 delay
//	stream_prefix=P  prefix of created stream names (default OUTBOX)
//	replicas=N       replicas of created streams (default 1)
//
// Streams are created per topic on first use (see adapters/nats); a
// stream that already captures a topic's subject is used as it is.
func openNATS(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	q, err := broker.Query(u, "dedup_window", "stream_prefix", "replicas")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: nats:// needs at least one host:port", broker.ErrInvalidURL)
	}
	var stream StreamConfig
	if d := q.Get("dedup_window"); d != "" {
		if stream.DedupWindow, err = time.ParseDuration(d); err != nil || stream.DedupWindow <= 0 {
			return nil, fmt.Errorf("%w: dedup_window=%q is not a positive duration", broker.ErrInvalidURL, d)
		}
	}
	stream.Prefix = q.Get("stream_prefix")
	if r := q.Get("replicas"); r != "" {
		if _, err := fmt.Sscan(r, &stream.Replicas); err != nil || stream.Replicas < 1 {
			return nil, fmt.Errorf("%w: replicas=%q is not a positive integer", broker.ErrInvalidURL, r)
		}
	}
	if err := stream.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", broker.ErrInvalidURL, err)
	}
	hosts := strings.Split(u.Host, ",")
	for i, h := range hosts {
		hosts[i] = (&url.URL{Scheme: "nats", User: u.User, Host: h}).String()
	}
	server := strings.Join(hosts, ",")
	pub, err := NewPublisher(PublisherConfig{URL: server, Stream: stream, Logger: logger})
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		// Order: one group handles one message at a time in stream order
		// (MaxAckPending 1). Dedup: Nats-Msg-Id is the event id, within the
		// duplicate window. Durable: file storage and PubAck before Publish
		// returns.
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Dedup: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			return NewSubscriber(SubscriberConfig{URL: server, ConsumerGroup: group, Stream: stream, Logger: logger})
		},
	}), nil
}
