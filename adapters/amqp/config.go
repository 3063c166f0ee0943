package amqp

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Mode is how a Watermill topic maps to RabbitMQ exchanges and queues.
type Mode int

const (
	// ModeQueue is one durable queue per topic, named after the topic,
	// reached through the default exchange with the topic as routing key
	// (watermill-amqp's NewDurableQueueConfig). Every subscriber of a topic
	// consumes from that one queue: a topic has exactly one consumer group.
	// The publisher declares the queue itself before its first publish, so
	// no message is ever unroutable, whether or not a subscriber has run.
	ModeQueue Mode = iota

	// ModePubSub is one durable fanout exchange per topic, named after the
	// topic, and one durable queue per (topic, group), named
	// "<topic>_<group>" and bound to it (watermill-amqp's
	// NewDurablePubSubConfig with GenerateQueueNameTopicNameWithSuffix).
	// Every group gets every message. The publisher declares the exchange
	// and the queues of [Config.Groups]; any other group's queue exists
	// only once that group has subscribed (or called SubscribeInitialize),
	// and it misses what was published before. A message no queue takes
	// fails with a permanent [UnroutableError].
	ModePubSub
)

// String returns "queue" or "pubsub".
func (m Mode) String() string {
	switch m {
	case ModeQueue:
		return "queue"
	case ModePubSub:
		return "pubsub"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Config configures a [Publisher] and a [Subscriber]. Give both the same
// Config (but Group) so that they declare the same topology: RabbitMQ
// refuses to redeclare a queue with other arguments (406
// PRECONDITION_FAILED, inequivalent arg). Only URL is required; every other
// field's zero value means the documented default.
type Config struct {
	// URL is the broker's address: amqp://user:pass@host:5672/vhost or
	// amqps://... Required.
	URL string

	// Mode maps topics to exchanges and queues.
	//
	// Default: [ModeQueue].
	Mode Mode

	// Group names the subscriber's consumer group in [ModePubSub]: its
	// queue for topic T is "T_<Group>". Required for a subscriber in
	// ModePubSub; must be empty in ModeQueue (where a topic's queue is
	// shared by every subscriber) and for a publisher.
	Group string

	// Groups lists, in [ModePubSub], the groups whose queues the publisher
	// declares and binds before its first publish to a topic, so that these
	// groups receive every message even if they have never run. Groups not
	// listed receive what is published after they first subscribe.
	//
	// Default: none (the publisher declares only the exchange).
	Groups []string

	// NotDurable makes exchanges and queues non-durable and messages
	// transient: a broker restart loses them. Only for tests and caches.
	//
	// Default: false: durable exchanges and queues and persistent messages
	// (delivery mode 2), whatever the Marshaler sets.
	NotDurable bool

	// Quorum declares queues with x-queue-type=quorum: replicated with Raft
	// on a cluster, and a confirm means a majority of nodes has the message.
	// Use it on a cluster; on one node a classic durable queue is as safe.
	// A queue's type cannot change once declared. A quorum queue redelivers
	// a nacked (requeued) message after messages published later (seen on
	// RabbitMQ 3.10), so with Quorum a handler that must keep per-aggregate
	// order retries in process (Watermill's Retry middleware) rather than
	// nacking.
	//
	// Default: false (classic queues).
	Quorum bool

	// CompetingConsumers lets several subscribers of one queue receive
	// messages at once, spreading the load but giving up order: RabbitMQ
	// keeps a queue's order only towards a single consumer.
	//
	// Default: false: queues are declared with
	// x-single-active-consumer=true, so RabbitMQ delivers to one consumer at
	// a time and the others wait as hot standbys; per-aggregate order holds
	// however many subscribers run.
	CompetingConsumers bool

	// QueueArguments are added to the arguments of every queue this package
	// declares (x-max-length-bytes, x-overflow, x-expires, x-message-ttl,
	// x-dead-letter-exchange, ...). They must not set x-queue-type or
	// x-single-active-consumer; use Quorum and CompetingConsumers.
	//
	// They are an escape hatch outside this package's guarantees. Arguments
	// that make RabbitMQ drop messages lose events after they were
	// confirmed: x-message-ttl, x-max-length or x-max-length-bytes with the
	// default overflow (drop-head), x-expires on a queue nobody consumes.
	// x-overflow=reject-publish makes a full queue nack instead (retryable),
	// but one Publish call sends its messages before the confirms come
	// back, so if the queue drains between a nacked message and the next
	// message of the same aggregate, that next one is accepted first and
	// overtakes it. Size queues so that they never fill.
	//
	// Default: none.
	QueueArguments amqp091.Table

	// Marshaler turns Watermill messages into AMQP publishings and back.
	// The publisher sets the message-id property to the message UUID when
	// the marshaler leaves it empty, and forces persistent delivery unless
	// NotDurable.
	//
	// Default: [Marshaler], watermill-amqp's DefaultMarshaler (UUID in
	// the _watermill_message_uuid header, metadata as headers) reading
	// non-string headers too. A custom marshaler must accept the integer
	// x-delivery-count header quorum queues add on redelivery.
	Marshaler wamqp.Marshaler

	// PrefetchCount is the subscriber's QoS: how many unacknowledged
	// messages RabbitMQ sends it at once. Watermill hands out one message
	// at a time anyway, and with 1 a nacked message is redelivered before
	// any later one, so order holds across nacks.
	//
	// Default: 1.
	PrefetchCount int

	// ConfirmTimeout bounds how long [Publisher.Publish] waits for the
	// broker's confirmations of one call (and for the dial and topology
	// declaration before it). Messages still unconfirmed then fail with
	// [ErrUnconfirmed], and the publisher abandons the connection (it is
	// dead, or the broker is blocking publishers on a resource alarm) and
	// dials a new one on the next Publish.
	//
	// Default: 30s.
	ConfirmTimeout time.Duration

	// TLSConfig is used to dial amqps:// URLs.
	//
	// Default: nil (the system roots, for amqps://).
	TLSConfig *tls.Config

	// AMQPConfig, if set, is the amqp091-go dial configuration (SASL,
	// vhost, heartbeat, connection properties, Dial). Its TLSClientConfig
	// and TLSConfig must not both be set.
	//
	// Default: nil (amqp091-go's defaults: 10s heartbeat, 30s dial timeout).
	AMQPConfig *amqp091.Config

	// Reconnect is the subscriber's reconnect backoff (watermill-amqp's).
	//
	// Default: nil (watermill-amqp's DefaultReconnectConfig).
	Reconnect *wamqp.ReconnectConfig

	// TopologyBuilder declares queues, exchanges and bindings, for the
	// publisher and the subscriber alike.
	//
	// Default: watermill-amqp's DefaultTopologyBuilder.
	TopologyBuilder wamqp.TopologyBuilder

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewPublisher] or
	// [NewSubscriber] is called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Marshaler == nil {
		c.Marshaler = Marshaler{wamqp.DefaultMarshaler{NotPersistentDeliveryMode: c.NotDurable}}
	}
	if c.PrefetchCount == 0 {
		c.PrefetchCount = 1
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = 30 * time.Second
	}
	if c.TopologyBuilder == nil {
		c.TopologyBuilder = &wamqp.DefaultTopologyBuilder{}
	}
	c.Groups = slices.Clone(c.Groups)
	c.QueueArguments = maps.Clone(c.QueueArguments)
}

// Validate reports whether c is usable. A zero value other than URL is
// valid, since it means the default. Group is checked by [NewPublisher] and
// [NewSubscriber]. The error wraps [ErrInvalidConfig].
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return fmt.Errorf("%w: no URL", ErrInvalidConfig)
	case c.Mode != ModeQueue && c.Mode != ModePubSub:
		return fmt.Errorf("%w: unknown Mode %d", ErrInvalidConfig, int(c.Mode))
	case c.Mode == ModeQueue && len(c.Groups) > 0:
		return fmt.Errorf("%w: Groups is for ModePubSub; in ModeQueue a topic has one queue", ErrInvalidConfig)
	case c.PrefetchCount < 0:
		return fmt.Errorf("%w: negative PrefetchCount %d", ErrInvalidConfig, c.PrefetchCount)
	case c.ConfirmTimeout < 0:
		return fmt.Errorf("%w: negative ConfirmTimeout %s", ErrInvalidConfig, c.ConfirmTimeout)
	case c.Quorum && c.NotDurable:
		return fmt.Errorf("%w: quorum queues are always durable; NotDurable contradicts Quorum", ErrInvalidConfig)
	case c.AMQPConfig != nil && c.AMQPConfig.TLSClientConfig != nil && c.TLSConfig != nil:
		return fmt.Errorf("%w: both TLSConfig and AMQPConfig.TLSClientConfig are set", ErrInvalidConfig)
	}
	if _, err := amqp091.ParseURI(c.URL); err != nil {
		return fmt.Errorf("%w: URL: %w", ErrInvalidConfig, err)
	}
	for _, k := range []string{"x-queue-type", "x-single-active-consumer"} {
		if _, ok := c.QueueArguments[k]; ok {
			return fmt.Errorf("%w: QueueArguments sets %s; use Quorum or CompetingConsumers", ErrInvalidConfig, k)
		}
	}
	for i, g := range c.Groups {
		if err := validateGroup(g); err != nil {
			return fmt.Errorf("%w: Groups[%d]: %w", ErrInvalidConfig, i, err)
		}
	}
	return nil
}

func validateGroup(g string) error {
	if g == "" {
		return fmt.Errorf("empty group")
	}
	if strings.ContainsAny(g, " \t\n") {
		return fmt.Errorf("group %q contains white space", g)
	}
	return nil
}

// queueArguments returns the arguments of every queue declared with c.
func (c Config) queueArguments() amqp091.Table {
	args := amqp091.Table{}
	maps.Copy(args, c.QueueArguments)
	if c.Quorum {
		args["x-queue-type"] = "quorum"
	}
	if !c.CompetingConsumers {
		args["x-single-active-consumer"] = true
	}
	return args
}

// queueName returns the name of group's queue for topic.
func (c Config) queueName(topic, group string) string {
	if c.Mode == ModePubSub {
		return topic + "_" + group
	}
	return topic
}

// exchangeName returns the exchange messages for topic are published to.
func (c Config) exchangeName(topic string) string {
	if c.Mode == ModePubSub {
		return topic
	}
	return ""
}

// routingKey returns the routing key messages for topic are published with.
func (c Config) routingKey(topic string) string {
	if c.Mode == ModePubSub {
		return ""
	}
	return topic
}

// WatermillConfig returns the watermill-amqp Config that declares and
// consumes the same topology as c, for group (ignored in [ModeQueue]). It is
// what [NewSubscriber] runs on; a program that uses watermill-amqp directly
// builds its subscriber from it to read what a [Publisher] writes. Call it
// on a Config that has passed [NewPublisher] or [NewSubscriber], or after
// setting every field you rely on: it applies the defaults to a copy.
func (c Config) WatermillConfig(group string) wamqp.Config {
	c.setDefaults()
	durable := !c.NotDurable
	wc := wamqp.Config{
		Connection: wamqp.ConnectionConfig{
			AmqpURI:    c.URL,
			TLSConfig:  c.TLSConfig,
			AmqpConfig: c.AMQPConfig,
			Reconnect:  c.Reconnect,
		},
		Marshaler: c.Marshaler,
		Exchange: wamqp.ExchangeConfig{
			GenerateName: c.exchangeName,
			Durable:      durable,
		},
		Queue: wamqp.QueueConfig{
			GenerateName: func(topic string) string { return c.queueName(topic, group) },
			Durable:      durable,
			Arguments:    c.queueArguments(),
		},
		QueueBind: wamqp.QueueBindConfig{
			GenerateRoutingKey: func(string) string { return "" },
		},
		Publish: wamqp.PublishConfig{
			GenerateRoutingKey: c.routingKey,
			Mandatory:          true,
			ConfirmDelivery:    true,
		},
		Consume: wamqp.ConsumeConfig{
			Qos: wamqp.QosConfig{PrefetchCount: c.PrefetchCount},
		},
		TopologyBuilder: c.TopologyBuilder,
	}
	if c.Mode == ModePubSub {
		wc.Exchange.Type = "fanout"
	}
	return wc
}
