package redis

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers the package's URL schemes with package adapters/broker,
// so that importing the package is all broker.Open needs.
func init() {
	broker.Register("redis", openRedis)
}

// openRedis opens redis://[user:password@]host:port[/db] (Redis Streams; one
// stream key per topic). Parameters:
//
//	maxlen=N        trim streams to about N entries on publish (default: no
//	                trimming; trimming deletes entries a slow group has not
//	                read)
//	maxage=D        trim entries older than D, a Go duration (default: none)
//	dedupwindow=D   remember each published event id for D, a Go duration,
//	                and drop a repeated or stale write of it (default, and
//	                0: 10m, DefaultDedupWindow); off disables it
//
// Redis Streams do not deduplicate, so the publisher adds each entry through
// a Lua script that skips a message whose UUID (the event id) it added to
// the stream within the window (see adapters/redis): Guarantees reports
// Dedup true, unless dedupwindow=off. A write later than the window is a
// second entry, which the inbox drops. Redis keeps acknowledged entries
// across a restart only as its persistence settings say, so Durable is
// false. OrderPerAggregate holds with one subscriber per group at a time,
// also across a restart: a subscriber that stopped (a crash, a kill)
// holding messages leaves them pending, and the group's next subscriber
// hands them out first (see adapters/redis, SubscriberConfig.SharedGroup).
func openRedis(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	q, err := broker.Query(u, "maxlen", "maxage", "dedupwindow")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: redis:// needs host:port", broker.ErrInvalidURL)
	}
	pcfg := PublisherConfig{Logger: logger}
	if v := q.Get("maxlen"); v != "" {
		if pcfg.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || pcfg.MaxLen < 1 {
			return nil, fmt.Errorf("%w: maxlen=%q is not a positive integer", broker.ErrInvalidURL, v)
		}
	}
	if v := q.Get("maxage"); v != "" {
		if pcfg.MaxAge, err = time.ParseDuration(v); err != nil || pcfg.MaxAge <= 0 {
			return nil, fmt.Errorf("%w: maxage=%q is not a positive duration", broker.ErrInvalidURL, v)
		}
	}
	switch v := q.Get("dedupwindow"); v {
	case "":
	case "off":
		pcfg.DedupWindow = -1
	default:
		if pcfg.DedupWindow, err = time.ParseDuration(v); err != nil || pcfg.DedupWindow < 0 {
			return nil, fmt.Errorf("%w: dedupwindow=%q is not a duration of 0 (the default) or more, or off", broker.ErrInvalidURL, v)
		}
	}
	if err := pcfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", broker.ErrInvalidURL, err)
	}
	server := *u
	server.RawQuery = ""
	pcfg.URL = server.String()
	pub, err := NewPublisher(pcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", broker.ErrInvalidURL, err)
	}
	return broker.New(broker.Parts{
		// Order: entries in stream order, one subscriber per group hands
		// them out in order. Dedup by event id within the window, unless
		// turned off. Durability depends on the server's persistence
		// (AOF), which the adapter cannot see: reported false.
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Dedup: pcfg.DedupWindow >= 0, Durable: false, SharedAcrossProcesses: true, ConsumerGroups: true},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			return NewSubscriber(SubscriberConfig{URL: pcfg.URL, ConsumerGroup: group, Logger: logger})
		},
	}), nil
}
