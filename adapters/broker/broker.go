package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
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
	lag        func(ctx context.Context, group string, topics []string) ([]PartitionLag, error)

	mu     sync.Mutex
	subs   []message.Subscriber
	closed bool
}

// Opener opens a Broker from a URL whose scheme it was registered for (see
// [Register]). cfg.Logger is never nil. An opener rejects a parameter it
// does not know with an error wrapping [ErrInvalidURL] (see [Query]).
type Opener func(ctx context.Context, u *url.URL, cfg Config) (*Broker, error)

// The registry of openers by scheme: written by Register, from the init
// functions of the adapters, and read by Open, like database/sql's drivers.
var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// providers names, for each scheme an adapter of this project registers,
// the package to import for it, so that Open's error can say so.
var providers = map[string]string{
	"amqp":        "github.com/gooutbox/outbox/adapters/amqp",
	"amqps":       "github.com/gooutbox/outbox/adapters/amqp",
	"eventbridge": "github.com/gooutbox/outbox/adapters/eventbridge",
	"kafka":       "github.com/gooutbox/outbox/adapters/kafka",
	"memory":      "github.com/gooutbox/outbox/adapters/memory",
	"nats":        "github.com/gooutbox/outbox/adapters/nats",
	"postgres":    "github.com/gooutbox/outbox/adapters/sql",
	"postgresql":  "github.com/gooutbox/outbox/adapters/sql",
	"redis":       "github.com/gooutbox/outbox/adapters/redis",
	"servicebus":  "github.com/gooutbox/outbox/adapters/servicebus",
	"sns":         "github.com/gooutbox/outbox/adapters/sqs",
	"sqs":         "github.com/gooutbox/outbox/adapters/sqs",
}

// Register makes [Open] open URLs of scheme (case-insensitive) with open.
// Adapters call it from an init function, so that importing one registers
// its schemes. It panics if scheme is empty, open is nil, or scheme was
// registered already, as database/sql.Register does.
func Register(scheme string, open Opener) {
	scheme = strings.ToLower(scheme)
	if scheme == "" || open == nil {
		panic("broker: Register with an empty scheme or a nil opener")
	}
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("broker: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes returns the URL schemes [Open] accepts (those registered), sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open parses rawURL and opens the adapter registered for its scheme. The
// publisher is created at once (most adapters do not contact the broker
// until the first publish); subscribers are created by [Broker.Subscriber].
// Close the Broker when done. A scheme nobody registered is an error
// wrapping [ErrUnknownScheme] that names the package to import.
func Open(ctx context.Context, rawURL string, cfg Config) (*Broker, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	scheme := strings.ToLower(u.Scheme)
	openersMu.RLock()
	open, ok := openers[scheme]
	openersMu.RUnlock()
	if !ok {
		return nil, unknownScheme(u, scheme)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b, err := open(ctx, u, cfg)
	if err != nil {
		return nil, fmt.Errorf("broker: open %s: %w", redact(u), err)
	}
	b.scheme = scheme
	return b, nil
}

// unknownScheme is Open's error for a scheme with no opener.
func unknownScheme(u *url.URL, scheme string) error {
	registered := "none"
	if s := Schemes(); len(s) > 0 {
		registered = strings.Join(s, ", ")
	}
	if pkg, ok := providers[scheme]; ok {
		return fmt.Errorf("%w %q in %s: import _ %q to register it (registered: %s)", ErrUnknownScheme, u.Scheme, redact(u), pkg, registered)
	}
	return fmt.Errorf("%w %q in %s (registered: %s)", ErrUnknownScheme, u.Scheme, redact(u), registered)
}

// Parts are what an [Opener] builds a Broker from (see [New]).
type Parts struct {
	// Guarantees says what the broker promises as the opener configured
	// it.
	Guarantees Guarantees
	// Publisher is the Broker's publisher. Required. Broker.Close closes
	// it.
	Publisher message.Publisher
	// Subscriber returns a new subscriber in a consumer group (see
	// [Broker.Subscriber]). Required.
	Subscriber func(group string) (message.Subscriber, error)
	// Closers close what else the opener opened (a connection pool, say),
	// after the subscribers and the publisher.
	Closers []func() error
	// Lag, where the broker can tell, returns a consumer group's lag on
	// each partition of topics (every topic the group consumed, when none
	// is named): see [Broker.Lag]. Optional.
	Lag func(ctx context.Context, group string, topics []string) ([]PartitionLag, error)
}

// New returns a Broker made of p, for an [Opener].
func New(p Parts) *Broker {
	return &Broker{guarantees: p.Guarantees, publisher: p.Publisher, subscriber: p.Subscriber, closers: p.Closers, lag: p.Lag}
}

// PartitionLag is how far a consumer group is behind on one partition of
// a topic (a broker without partitions has one, 0).
type PartitionLag struct {
	Topic     string
	Partition int
	// Committed is the group's position: the next offset it reads; -1
	// when it committed none (it then starts at the partition's start).
	Committed int64
	// End is the position after the partition's last message.
	End int64
	// Lag is how many messages the group has yet to consume.
	Lag int64
}

// ErrLagUnsupported is the error of [Broker.Lag] on a broker whose adapter
// cannot tell a group's lag.
var ErrLagUnsupported = errors.New("broker: this broker's adapter does not report consumer lag")

// Lag returns the consumer group's lag on each partition of topics, in
// topic and partition order; with no topics, on every topic the group
// consumed. It needs no subscription. On a broker whose adapter cannot
// tell, it returns an error wrapping [ErrLagUnsupported].
func (b *Broker) Lag(ctx context.Context, group string, topics ...string) ([]PartitionLag, error) {
	if b.lag == nil {
		return nil, fmt.Errorf("%w (%s://)", ErrLagUnsupported, b.scheme)
	}
	if group == "" {
		return nil, fmt.Errorf("%w: empty consumer group", ErrInvalidURL)
	}
	return b.lag(ctx, group, topics)
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

// Query returns u's query parameters, or an error wrapping [ErrInvalidURL]
// naming the first one not in allowed: for openers, so that a typo is never
// silently ignored.
func Query(u *url.URL, allowed ...string) (url.Values, error) {
	q := u.Query()
	for k := range q {
		if !slices.Contains(allowed, k) {
			known := strings.Join(allowed, ", ")
			if known == "" {
				known = "none"
			}
			return nil, fmt.Errorf("%w: unknown parameter %q for %s:// (known: %s)", ErrInvalidURL, k, u.Scheme, known)
		}
	}
	return q, nil
}

// redact returns u as a string without its password.
func redact(u *url.URL) string { return u.Redacted() }
