package kafka

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/internal/testhooks"
)

// init gives this package's tests, which live in module internal/coretest,
// the internals they drive (see package testhooks).
func init() {
	h := &testhooks.Kafka
	h.SetStallWarnAfter = func(s any, d time.Duration) { s.(*Subscriber).stallWarnAfter = d }
	h.Fetch = fetch
	h.NewUnfencedPublisher = func(cfg any) (any, error) {
		p, err := NewPublisher(cfg.(PublisherConfig))
		if err != nil {
			return nil, err
		}
		t := &kafka.Transport{}
		for _, w := range p.set.Load().writers {
			w.Transport = t
		}
		return p, nil
	}
	h.Classify = classify
}
