package kafka

import (
	"time"

	"github.com/segmentio/kafka-go"
)

// SetStallWarnAfter sets how long a partition's stream stays full before s
// logs it (10s by default).
func SetStallWarnAfter(s *Subscriber, d time.Duration) { s.stallWarnAfter = d }

// Fetch is fetch, the subscriber's read of a reader's next record.
var Fetch = fetch

// NewUnfencedPublisher returns a Publisher whose writers dial without the
// fence (as before it), for benchmarks that measure what the fence costs.
func NewUnfencedPublisher(cfg PublisherConfig) (*Publisher, error) {
	p, err := NewPublisher(cfg)
	if err != nil {
		return nil, err
	}
	t := &kafka.Transport{}
	for _, w := range p.set.Load().writers {
		w.Transport = t
	}
	return p, nil
}

// Classify is classify, the publisher's error classes.
var Classify = classify
