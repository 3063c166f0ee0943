package memory

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers the package's URL schemes with package adapters/broker,
// so that importing the package is all broker.Open needs.
func init() {
	broker.Register("memory", openMemory)
}

// openMemory opens memory://, an in-process [PubSub]: publisher and
// subscribers are one instance, so only this process sees the messages, and
// they are gone when it exits. Every subscriber receives every message of a
// topic from its first one; [broker.Broker.Subscriber]'s group is ignored (no
// consumer groups). Parameters:
//
//	max_messages_per_topic=N  bound per topic; Publish fails past it (default 0, no bound)
func openMemory(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	q, err := broker.Query(u, "max_messages_per_topic")
	if err != nil {
		return nil, err
	}
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
		return nil, fmt.Errorf("%w: memory:// takes no host or path", broker.ErrInvalidURL)
	}
	cfg := Config{Logger: logger}
	if v := q.Get("max_messages_per_topic"); v != "" {
		if cfg.MaxMessagesPerTopic, err = strconv.Atoi(v); err != nil || cfg.MaxMessagesPerTopic < 0 {
			return nil, fmt.Errorf("%w: max_messages_per_topic=%q is not a non-negative integer", broker.ErrInvalidURL, v)
		}
	}
	ps, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: true},
		Publisher:  ps,
		Subscriber: func(string) (message.Subscriber, error) { return ps, nil },
	}), nil
}
