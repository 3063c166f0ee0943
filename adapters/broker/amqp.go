package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/amqp"
)

// amqpCheckTimeout bounds openAMQP's connection: RabbitMQ answers a
// refused login after 3 s (its default auth failure delay).
const amqpCheckTimeout = 10 * time.Second

// openAMQP opens amqp://user:pass@host:5672/vhost (or amqps://) on RabbitMQ
// with adapters/amqp. Parameters:
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
// user, password or vhost is ErrInvalidURL (it would fail every publish,
// retried forever); one that cannot be reached is not an error here (the
// publisher dials again when it publishes).
func openAMQP(ctx context.Context, u *url.URL, logger *slog.Logger) (*Broker, error) {
	q, err := query(u, "mode", "groups", "quorum")
	if err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s:// needs a host", ErrInvalidURL, u.Scheme)
	}
	cfg := amqp.Config{Logger: logger}
	switch m := q.Get("mode"); m {
	case "", "queue":
		cfg.Mode = amqp.ModeQueue
	case "pubsub":
		cfg.Mode = amqp.ModePubSub
	default:
		return nil, fmt.Errorf("%w: mode=%q (want queue or pubsub)", ErrInvalidURL, m)
	}
	if g := q.Get("groups"); g != "" {
		if cfg.Mode != amqp.ModePubSub {
			return nil, fmt.Errorf("%w: groups= needs mode=pubsub", ErrInvalidURL)
		}
		cfg.Groups = strings.Split(g, ",")
	}
	switch v := q.Get("quorum"); v {
	case "", "false", "0":
	case "true", "1":
		cfg.Quorum = true
	default:
		return nil, fmt.Errorf("%w: quorum=%q (want true or false)", ErrInvalidURL, v)
	}
	plain := *u
	plain.RawQuery = ""
	cfg.URL = plain.String()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	pub, err := amqp.NewPublisher(cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, amqpCheckTimeout)
	err = pub.Connect(cctx)
	cancel()
	if errors.Is(err, amqp.ErrAccessRefused) {
		_ = pub.Close()
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	subCfg := cfg
	subCfg.Groups = nil
	return &Broker{
		guarantees: Guarantees{OrderPerAggregate: !cfg.Quorum, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: cfg.Mode == amqp.ModePubSub},
		publisher:  pub,
		subscriber: func(group string) (message.Subscriber, error) {
			c := subCfg
			if c.Mode == amqp.ModePubSub {
				c.Group = group
			}
			return amqp.NewSubscriber(c)
		},
	}, nil
}
