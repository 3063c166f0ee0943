// Package broker opens a broker adapter from a URL, so that choosing a
// broker is configuration: the examples and the relay command take a
// -broker-url flag and call [Open].
//
//	kafka://host:9092[,host2:9092]        adapters/kafka
//	amqp://user:pass@host:5672/vhost      adapters/amqp (RabbitMQ; amqps:// too)
//	nats://host:4222                      adapters/nats (JetStream)
//	redis://host:6379/0                   adapters/redis (Redis Streams)
//	postgres://user@host:5432/db          adapters/sql (watermill-sql on PostgreSQL)
//	memory://                             adapters/memory (in-process)
//	sqs://host:port                       adapters/sqs (SQS FIFO)
//	sns://host:port                       adapters/sqs (SNS FIFO fan-out to SQS FIFO)
//
// Each scheme's query parameters are documented on its open function and in
// the README's broker table. Unknown query parameters are an error, so a typo
// never silently falls back to a default.
//
// Importing this package compiles every adapter. A program that uses one
// broker imports that adapter's package instead and pays for nothing else.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrUnknownScheme is wrapped by [Open]'s error when the URL's scheme names
// no adapter.
var ErrUnknownScheme = errors.New("broker: unknown URL scheme")

// ErrInvalidURL is wrapped by [Open]'s error when the URL cannot be parsed or
// carries a parameter its scheme does not take.
var ErrInvalidURL = errors.New("broker: invalid URL")

// Config configures [Open]. Its zero value is ready to use.
type Config struct {
	// Logger receives the logs of the adapter Open builds: it is passed in
	// the adapter's config (e.g. kafka.PublisherConfig.Logger), and the
	// adapter bridges it to Watermill once, inside.
	//
	// Default: nil, which means slog.Default() as it is when [Open] is
	// called, as in runtime/relay and runtime/consumer.
	Logger *slog.Logger
}

// Guarantees says what a broker promises for messages published through its
// adapter as this package configures it. The README's broker table and the
// conformance suite (package adapters/adaptertest) read it.
type Guarantees struct {
	// OrderPerAggregate: messages with the same aggregate_id metadata reach a
	// subscriber in the order they were published.
	OrderPerAggregate bool

	// Dedup: the broker drops a message whose event id it has already stored
	// (within the broker's deduplication window), so a relay's republish
	// after an ambiguous write reaches no subscriber twice.
	Dedup bool

	// Durable: a message whose publish was acknowledged survives a broker
	// restart.
	Durable bool

	// SharedAcrossProcesses: a subscriber in another process sees what this
	// process published (false only for the in-memory broker).
	SharedAcrossProcesses bool

	// ConsumerGroups: every group named in [Broker.Subscriber] receives
	// every message, and the subscribers of one group share them. When
	// false the group is ignored: all subscribers of a topic share one
	// queue (amqp:// in queue mode, sqs://), or every subscriber receives
	// every message (memory://).
	ConsumerGroups bool
}

// Broker is an opened broker: one publisher, and subscribers made on demand.
// It is safe for concurrent use.
type Broker struct {
	scheme     string
	guarantees Guarantees
	publisher  message.Publisher
	subscriber func(group string) (message.Subscriber, error)
	closers    []func() error

	mu     sync.Mutex
	subs   []message.Subscriber
	closed bool
}

// opener builds a Broker for one scheme from its parsed URL.
type opener func(ctx context.Context, u *url.URL, logger *slog.Logger) (*Broker, error)

// openers maps every scheme [Open] accepts to its opener. It is never
// written after package initialisation.
var openers = map[string]opener{
	"amqp":       openAMQP,
	"amqps":      openAMQP,
	"kafka":      openKafka,
	"memory":     openMemory,
	"nats":       openNATS,
	"postgres":   openPostgres,
	"postgresql": openPostgres,
	"redis":      openRedis,
	"sns":        openSNS,
	"sqs":        openSQS,
}

// Schemes returns the URL schemes [Open] accepts, sorted.
func Schemes() []string {
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open parses rawURL and opens the adapter its scheme names. The publisher is
// created at once (most adapters do not contact the broker until the first
// publish); subscribers are created by [Broker.Subscriber]. Close the Broker
// when done.
func Open(ctx context.Context, rawURL string, cfg Config) (*Broker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	scheme := strings.ToLower(u.Scheme)
	open, ok := openers[scheme]
	if !ok {
		return nil, fmt.Errorf("%w %q in %s (want one of %s)", ErrUnknownScheme, u.Scheme, redact(u), strings.Join(Schemes(), ", "))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	b, err := open(ctx, u, logger)
	if err != nil {
		return nil, fmt.Errorf("broker: open %s: %w", redact(u), err)
	}
	b.scheme = scheme
	return b, nil
}

// Scheme returns the URL scheme the Broker was opened with, in lower case.
func (b *Broker) Scheme() string { return b.scheme }

// Guarantees returns what the broker promises as configured.
func (b *Broker) Guarantees() Guarantees { return b.guarantees }

// Publisher returns the Broker's publisher, for the relay. It is closed by
// [Broker.Close].
func (b *Broker) Publisher() message.Publisher { return b.publisher }

// Subscriber returns a new subscriber in the consumer group (or durable
// subscription, or queue suffix: each adapter's documentation says what a
// group is there) named group. Where [Guarantees.ConsumerGroups] holds,
// every group receives every message and the subscribers of one group share
// them; elsewhere the group is ignored (see ConsumerGroups). It is closed by
// [Broker.Close].
func (b *Broker) Subscriber(group string) (message.Subscriber, error) {
	if group == "" {
		return nil, fmt.Errorf("%w: empty consumer group", ErrInvalidURL)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("broker: closed")
	}
	s, err := b.subscriber(group)
	if err != nil {
		return nil, err
	}
	b.subs = append(b.subs, s)
	return s, nil
}

// Close closes the subscribers, then the publisher and whatever the adapter
// opened. It returns every error, joined.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := b.subs
	b.mu.Unlock()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Close())
	}
	if b.publisher != nil {
		errs = append(errs, b.publisher.Close())
	}
	for _, c := range b.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// query reads u's query parameters, rejecting any not in allowed.
func query(u *url.URL, allowed ...string) (url.Values, error) {
	q := u.Query()
	for k := range q {
		known := false
		for _, a := range allowed {
			if k == a {
				known = true
				break
			}
		}
		if !known {
			return nil, fmt.Errorf("%w: unknown parameter %q for %s:// (known: %s)", ErrInvalidURL, k, u.Scheme, strings.Join(allowed, ", "))
		}
	}
	return q, nil
}

// redact returns u as a string without its password.
func redact(u *url.URL) string { return u.Redacted() }
