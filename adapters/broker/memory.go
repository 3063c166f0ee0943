package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/memory"
)

// openMemory opens memory://, an in-process [memory.PubSub]: publisher and
// subscribers are one instance, so only this process sees the messages, and
// they are gone when it exits. Every subscriber receives every message of a
// topic from its first one; [Broker.Subscriber]'s group is ignored (no
// consumer groups). Parameters:
//
//	max_messages_per_topic=N  bound per topic; Publish fails past it (default 0, no bound)
func openMemory(_ context.Context, u *url.URL, logger *slog.Logger) (*Broker, error) {
	q, err := query(u, "max_messages_per_topic")
	if err != nil {
		return nil, err
	}
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
		return nil, fmt.Errorf("%w: memory:// takes no host or path", ErrInvalidURL)
	}
	cfg := memory.Config{Logger: logger}
	if v := q.Get("max_messages_per_topic"); v != "" {
		if cfg.MaxMessagesPerTopic, err = strconv.Atoi(v); err != nil || cfg.MaxMessagesPerTopic < 0 {
			return nil, fmt.Errorf("%w: max_messages_per_topic=%q is not a non-negative integer", ErrInvalidURL, v)
		}
	}
	ps, err := memory.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Broker{
		guarantees: Guarantees{OrderPerAggregate: true},
		publisher:  ps,
		subscriber: func(string) (message.Subscriber, error) { return ps, nil },
	}, nil
}
