package amqp

import (
	"context"
	"errors"
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
	broker.Register("amqp", openAMQP)
	broker.Register("amqps", openAMQP)
}

// amqpCheckTimeout bounds openAMQP's connection: RabbitMQ answers a
// refused login after 3 s (its default auth failure delay).
const amqpCheckTimeout = 10 * time.Second

// openAMQP opens amqp://user:pass@host:5672/vhost (or amqps://) on RabbitMQ
// with adapters/ Parameters:
//
//	mode=queue|pubsub  queue (default): one durable queue per topic, shared
//	                   by every subscriber, whatever its group; pubsub: a
//	                   fanout exchange per topic and a queue per (topic, group)
//	groups=a,b         pubsub only: groups whose queues the publisher
//	                   declares, so they miss nothing published before they
//	                   first subscribe
//	quorum=true|false  quorum queues (default false: classic durable queues)
//
// Order per aggregate holds with classic queues (single active consumer,
// prefetch 1); a quorum queue redelivers a nacked message after later ones,
// so Guarantees.OrderPerAggregate is false with quorum=true.
//
// Open connects once, within amqpCheckTimeout: a broker that refuses the
// user, password or vhost is broker.ErrInvalidURL (it would fail every publish,
// retried forever); one that cannot be reached is not an error here (the
// publisher dials again when it publishes).
func openAMQP(ctx context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	logger := bcfg.Logger
	q, err := broker.Query(u, "mode", "groups", "quorum")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s:// needs a host", broker.ErrInvalidURL, u.Scheme)
	}
	cfg := Config{Logger: logger}
	switch m := q.Get("mode"); m {
	case "", "queue":
		cfg.Mode = ModeQueue
	case "pubsub":
		cfg.Mode = ModePubSub
	default:
		return nil, fmt.Errorf("%w: mode=%q (want queue or pubsub)", broker.ErrInvalidURL, m)
	}
	if g := q.Get("groups"); g != "" {
		if cfg.Mode != ModePubSub {
			return nil, fmt.Errorf("%w: groups= needs mode=pubsub", broker.ErrInvalidURL)
		}
		cfg.Groups = strings.Split(g, ",")
	}
	switch v := q.Get("quorum"); v {
	case "", "false", "0":
	case "true", "1":
		cfg.Quorum = true
	default:
		return nil, fmt.Errorf("%w: quorum=%q (want true or false)", broker.ErrInvalidURL, v)
	}
	plain := *u
	plain.RawQuery = ""
	cfg.URL = plain.String()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", broker.ErrInvalidURL, err)
	}
	pub, err := NewPublisher(cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, amqpCheckTimeout)
	err = pub.Connect(cctx)
	cancel()
	if errors.Is(err, ErrAccessRefused) {
		_ = pub.Close()
		return nil, fmt.Errorf("%w: %w", broker.ErrInvalidURL, err)
	}
	subCfg := cfg
	subCfg.Groups = nil
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: !cfg.Quorum, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: cfg.Mode == ModePubSub},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			c := subCfg
			if c.Mode == ModePubSub {
				c.Group = group
			}
			return NewSubscriber(c)
		},
	}), nil
}
