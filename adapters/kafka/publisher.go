package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/internal/fence"
	"github.com/gooutbox/outbox/runtime"
)

// PublisherConfig configures a [Publisher]. Only Brokers is required; every
// other field's zero value means the documented default.
type PublisherConfig struct {
	// Brokers lists the bootstrap broker addresses ("host:port"). Required.
	Brokers []string

	// Key returns the Kafka key of a message published to topic. Records with
	// equal keys go to the same partition and keep their relative order; a nil
	// key makes kafka.Hash pick a partition round robin (no ordering). An error
	// fails the whole Publish call before anything is written.
	//
	// Default: [AggregateIDKey], the aggregate_id metadata.
	Key func(topic string, msg *message.Message) ([]byte, error)

	// AllowAutoTopicCreation lets the broker create a topic on first publish
	// (if the broker allows it too), with the broker's default partition
	// count. Topics a Subscriber creates through
	// [Subscriber.SubscribeInitialize] get explicit settings instead.
	//
	// Default: false; publishing to a missing topic fails after the writer's
	// retries with an error wrapping kafka.UnknownTopicOrPartition that says
	// so (the relay logs it and retries; the events wait in the outbox until
	// the topic exists). Create topics before the relay publishes to them,
	// with the partition count the consumers need: a producer deployed
	// before its consumers otherwise publishes nothing until they subscribe
	// ([Subscriber.SubscribeInitialize] creates a topic it does not find).
	AllowAutoTopicCreation bool

	// BatchSize is the most records the writer puts in one produce request for
	// one partition.
	//
	// kafka-go preallocates BatchSize records (about 150 bytes each) for every
	// partition batch, however few records it holds. So that a relay
	// publishing a few events at a time does not allocate ~150 KB per
	// partition per call, the publisher keeps up to two more kafka-go Writers,
	// with BatchSize 16 and 128 when BatchSize is larger, and writes each
	// Publish call through the smallest whose BatchSize is at least the call's
	// record count. Each partition's records of a call then still go in one
	// produce request (BatchBytes permitting), as with one writer.
	//
	// Default: 1000.
	BatchSize int

	// BatchBytes is the largest produce request, in bytes, for one partition.
	// A single record larger than this fails Publish with a
	// kafka.MessageTooLargeError before anything is written. Keep it at or
	// below the broker's message.max.bytes.
	//
	// Default: 1 MiB (1048576, kafka-go's default).
	BatchBytes int64

	// BatchTimeout is how long a partition batch that is not full waits for
	// more records before it is sent. Publish is synchronous, so every call
	// that fills no batch waits this long.
	//
	// Default: 200µs (kafka-go's own default is 1s). Publish hands the writer
	// a whole batch at once, so a longer linger only adds latency.
	BatchTimeout time.Duration

	// MaxAttempts is how many times the writer tries a produce request
	// before Publish reports the failure. The relay retries failed messages
	// itself, so a partition that is down costs a batch about half a second
	// rather than kafka-go's default of 10 attempts (about 7s), and the
	// healthy partitions' messages of the batch are marked without waiting.
	//
	// Default: 3.
	MaxAttempts int

	// OverwriteWriter, if set, is called with each built kafka-go Writer
	// before first use, to set what this config does not expose: Transport
	// (TLS, SASL, client id), MaxAttempts, WriteTimeout, Compression,
	// Completion, loggers, or another Balancer (kafka.Murmur2Balancer matches
	// the Java client's partitioning). It must not set Async or Topic, and
	// must leave a non-nil Balancer and Addr; NewPublisher rejects those.
	// NewPublisher calls it once per writer, up to three times (see
	// BatchSize), all before it returns, and again for each writer the
	// Publisher builds after retiring its writers (a Publish abandoned:
	// see Fencing on [Publisher]); a BatchSize it sets is the largest
	// writer's, and the smaller writers keep their own. A Transport it sets
	// must be a *kafka.Transport for fencing; the Publisher uses a copy of
	// it that dials through the fence and does the TLS of its TLS field
	// itself.
	//
	// Default: nil (no change).
	OverwriteWriter func(w *kafka.Writer)

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger; and, at
	// WARN as "kafka-go writer error", each produce attempt that failed,
	// which the writer retries itself up to MaxAttempts (an attempt that
	// timed out may have been written all the same: its retry then writes
	// its records twice, a duplicate the inbox absorbs).
	// Default: nil, which means slog.Default() as it is when [NewPublisher] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *PublisherConfig) setDefaults() {
	if c.Key == nil {
		c.Key = AggregateIDKey
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 1 << 20
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = 200 * time.Microsecond
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
}

// Validate reports whether c is usable. A zero value other than Brokers is
// valid, since it means the default. The error wraps [ErrInvalidConfig].
func (c PublisherConfig) Validate() error {
	if err := validateBrokers(c.Brokers); err != nil {
		return err
	}
	switch {
	case c.BatchSize < 0:
		return fmt.Errorf("%w: negative BatchSize %d", ErrInvalidConfig, c.BatchSize)
	case c.BatchBytes < 0:
		return fmt.Errorf("%w: negative BatchBytes %d", ErrInvalidConfig, c.BatchBytes)
	case c.BatchTimeout < 0:
		return fmt.Errorf("%w: negative BatchTimeout %s", ErrInvalidConfig, c.BatchTimeout)
	case c.MaxAttempts < 0:
		return fmt.Errorf("%w: negative MaxAttempts %d", ErrInvalidConfig, c.MaxAttempts)
	}
	return nil
}

func validateBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return fmt.Errorf("%w: no Brokers", ErrInvalidConfig)
	}
	for i, b := range brokers {
		if strings.TrimSpace(b) == "" {
			return fmt.Errorf("%w: Brokers[%d] is empty", ErrInvalidConfig, i)
		}
		if scheme, _, ok := strings.Cut(b, "://"); ok {
			// kafka-go would take "kafka" for a host name and retry
			// forever: a kafka:// URL is adapters/broker's form (and the
			// outbox command's --broker), not an address.
			return fmt.Errorf("%w: Brokers[%d] %q is a URL: give the broker's host:port, without %s://", ErrInvalidConfig, i, b, scheme)
		}
	}
	return nil
}

// Publisher is a Watermill [message.Publisher] that writes to Kafka through
// kafka-go Writers that differ only in BatchSize (see
// [PublisherConfig.BatchSize]). It is safe for concurrent use; concurrent
// Publish calls of similar size share a writer's per-partition batches.
//
// # Fencing
//
// A Publish call's produce requests reach the network only before the
// deadline of its messages' contexts (the relay gives them the end of its
// lease), and never after the call has ended: kafka-go goes on writing the
// batches of a WriteMessages call whose context ended, from goroutines of
// its own, so the Publisher fences them at the connection. Its writers
// dial through a gate that refuses, and aborts the connection of, any
// produce request written after the latest deadline of the calls made
// through them; and when a call's context ends before its write has
// (a relay paused mid-publish and woken after its lease, a publish
// abandoned at a hand-over), the Publisher retires those writers at once
// (their connections aborted with SO_LINGER 0, so the kernel drops what it
// still held to send) and builds new ones for the next call. A relay that
// lost its lease thus never has a write reach the broker after its
// successor's. What is left: bytes already handed to the kernel before the
// deadline, which reach the broker within a round trip unless the network
// holds them (a partition that outlasts the lease, healed while the
// process is frozen as well), and a write that passed the check in the
// microseconds before the process froze. Fencing needs the writers'
// Transport to be a *kafka.Transport (or nil, the default): another
// RoundTripper set by OverwriteWriter is used as it is, unfenced.
type Publisher struct {
	cfg PublisherConfig
	// set is the writers in use; replaced when a Publish is abandoned.
	set    atomic.Pointer[writerSet]
	logger watermill.LoggerAdapter

	// mu is held for reading by every Publish in flight and for writing by
	// Close, so Close waits for in-flight publishes before closing the writers.
	mu     sync.RWMutex
	closed bool
	// retiring counts retired writer sets still closing.
	retiring sync.WaitGroup
}

// writerSet is the kafka-go Writers of a Publisher, fenced by one gate.
type writerSet struct {
	gate *fence.Gate
	// writers are by BatchSize, smallest first; the last is the one of
	// cfg.BatchSize (or OverwriteWriter's).
	writers []*kafka.Writer
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher configured by cfg. It logs to cfg.Logger.
// It does not contact the brokers; the first Publish does. The error wraps
// [ErrInvalidConfig] when cfg is invalid.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	cfg.Brokers = slices.Clone(cfg.Brokers)
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	set, err := newWriterSet(cfg)
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, logger: logger.With(watermill.LogFields{"component": "kafka_publisher"})}
	p.set.Store(set)
	return p, nil
}

// newWriterSet builds the writers of cfg behind a new gate.
func newWriterSet(cfg PublisherConfig) (*writerSet, error) {
	set := &writerSet{gate: newGate()}
	fenced := map[*kafka.Transport]*kafka.Transport{}
	largest, err := newWriter(cfg, set.gate, fenced)
	if err != nil {
		return nil, err
	}
	for _, size := range smallWriterSizes {
		if size >= effectiveBatchSize(largest) {
			break
		}
		w, err := newWriter(cfg, set.gate, fenced)
		if err != nil {
			return nil, err
		}
		w.BatchSize = size
		set.writers = append(set.writers, w)
	}
	set.writers = append(set.writers, largest)
	return set, nil
}

// smallWriterSizes are the BatchSize of the writers a Publisher keeps
// beside the one of [PublisherConfig.BatchSize], smallest first (see
// there).
var smallWriterSizes = [...]int{16, 128}

// writerErrors returns the logger of a writer's errors: kafka-go reports
// there each produce attempt that failed, which it retries itself (up to
// MaxAttempts) before WriteMessages returns. WARN, as the relay logs what
// it retries: an attempt that timed out may have been written all the
// same, and its retry then writes its records twice, which nothing else
// would show. logger nil means slog.Default() as it is now.
func writerErrors(logger *slog.Logger) kafka.Logger {
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "kafka_publisher")
	return kafka.LoggerFunc(func(format string, args ...any) {
		logger.Warn("kafka-go writer error", "error", fmt.Sprintf(format, args...))
	})
}

// newWriter builds one kafka-go Writer of cfg, with cfg.OverwriteWriter
// applied and checked, and its Transport fenced by g: a copy of the
// *kafka.Transport it has (a new one for none) that dials through g, one
// per Transport of the set (fenced maps them).
func newWriter(cfg PublisherConfig, g *fence.Gate, fenced map[*kafka.Transport]*kafka.Transport) (*kafka.Writer, error) {
	w := &kafka.Writer{
		Addr:                   kafka.TCP(cfg.Brokers...),
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchSize:              cfg.BatchSize,
		BatchBytes:             cfg.BatchBytes,
		BatchTimeout:           cfg.BatchTimeout,
		AllowAutoTopicCreation: cfg.AllowAutoTopicCreation,
		MaxAttempts:            cfg.MaxAttempts,
		ErrorLogger:            writerErrors(cfg.Logger),
	}
	if cfg.OverwriteWriter != nil {
		cfg.OverwriteWriter(w)
	}
	switch {
	case w.Async:
		return nil, fmt.Errorf("%w: OverwriteWriter set Async, which would hide write errors from Publish", ErrInvalidConfig)
	case w.Topic != "":
		return nil, fmt.Errorf("%w: OverwriteWriter set Topic; Publish names the topic", ErrInvalidConfig)
	case w.Balancer == nil:
		return nil, fmt.Errorf("%w: OverwriteWriter cleared Balancer, which would ignore keys", ErrInvalidConfig)
	case w.Addr == nil:
		return nil, fmt.Errorf("%w: OverwriteWriter cleared Addr", ErrInvalidConfig)
	case w.BatchSize < 0:
		return nil, fmt.Errorf("%w: OverwriteWriter set a negative BatchSize %d", ErrInvalidConfig, w.BatchSize)
	}
	switch t := w.Transport.(type) {
	case nil:
		w.Transport = fenceTransport(nil, g, fenced)
	case *kafka.Transport:
		w.Transport = fenceTransport(t, g, fenced)
	}
	return w, nil
}

// fenceTransport returns the copy of t (nil: kafka-go's defaults) that
// dials through g, made once per t (see fenced). The copy does TLS itself,
// so that g sees the protocol's frames.
func fenceTransport(t *kafka.Transport, g *fence.Gate, fenced map[*kafka.Transport]*kafka.Transport) *kafka.Transport {
	if f, ok := fenced[t]; ok {
		return f
	}
	f := &kafka.Transport{}
	if t != nil {
		f = &kafka.Transport{
			Dial:           t.Dial,
			DialTimeout:    t.DialTimeout,
			IdleTimeout:    t.IdleTimeout,
			MetadataTTL:    t.MetadataTTL,
			MetadataTopics: t.MetadataTopics,
			ClientID:       t.ClientID,
			SASL:           t.SASL,
			Resolver:       t.Resolver,
			Context:        t.Context,
		}
	}
	var tlsConfig *tls.Config
	if t != nil {
		tlsConfig = t.TLS
	}
	f.Dial = fencedDialer(g, f.Dial, tlsConfig)
	fenced[t] = f
	return f
}

// effectiveBatchSize is w's BatchSize as kafka-go applies it: 100 when zero.
func effectiveBatchSize(w *kafka.Writer) int {
	if w.BatchSize == 0 {
		return 100
	}
	return w.BatchSize
}

// writerFor returns the writer for a call of n records: the smallest whose
// BatchSize holds them all, or else the largest.
func (s *writerSet) writerFor(n int) *kafka.Writer {
	last := len(s.writers) - 1
	for _, w := range s.writers[:last] {
		if n <= w.BatchSize {
			return w
		}
	}
	return s.writers[last]
}

// Publish writes msgs to topic with one synchronous kafka-go WriteMessages
// call, on the writer sized for len(msgs), and returns when the broker has
// acknowledged every record (all in-sync replicas) or the write has failed.
// Records are keyed by [PublisherConfig.Key]; records with the same key
// keep their order within a call and across calls that do not overlap.
//
// The write runs under the messages' contexts (msg.Context()): it stops
// when any of them is done, and none of its produce requests is written
// after that, nor after the contexts' deadline (see Fencing on
// [Publisher]). A request sent before may still have been written to the
// log, so treat a write stopped that way, or by a timeout, as ambiguous and
// publish again: consumers see a duplicate with the same UUID.
//
// Errors from kafka-go are wrapped with %w. kafka.MessageTooLargeError means
// one record exceeds [PublisherConfig.BatchBytes] and nothing was written;
// When kafka-go reports per message (kafka.WriteErrors: some partitions
// failed, others did not), the error wraps a [runtime.PublishErrors] with
// one entry per message, nil for the ones written, so the relay marks
// exactly those and retries only the others. After [Publisher.Close],
// Publish returns [ErrPublisherClosed].
//
// When the broker will never take a message (too large, an invalid topic),
// the error is a [*runtime.PermanentError], for the whole call: one such
// message makes the relay look for it aggregate by aggregate, and park it.
// When the broker or the connection failed, not the message (an error code
// Kafka classes as retriable, a lost connection, a timeout: see the
// package doc's Error classes), the error, or the message's entry in the
// PublishErrors, is a [*runtime.TransientError]: the outbox store retries
// the message without counting the attempt toward parking it.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := ValidateTopic(topic); err != nil {
		// No broker takes it, however often it is retried.
		return runtime.Permanent(fmt.Errorf("kafka: publish %d messages to topic %q: %w", len(msgs), topic, err))
	}
	records := make([]kafka.Message, len(msgs))
	for i, msg := range msgs {
		key, err := p.cfg.Key(topic, msg)
		if err != nil {
			return keyError(topic, msg, err)
		}
		records[i] = toRecord(topic, msg, key)
	}

	ctx, cancel := writeContext(msgs)
	defer cancel()
	if ctx.Err() != nil {
		return fmt.Errorf("kafka: publish %d messages to topic %q: %w", len(msgs), topic, context.Cause(ctx))
	}
	start := time.Now()
	set := p.writers()
	end := set.gate.Begin(ctx)
	// A call whose context ends before its write does leaves batches that
	// kafka-go would still send: retire the writers at once (see Fencing).
	retired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(retired)
		p.retire(set)
	})
	err := set.writerFor(len(records)).WriteMessages(ctx, records...)
	if !stop() {
		<-retired // retired within the call, under p.mu (see Close)
	} else if ctx.Err() != nil {
		p.retire(set)
	}
	end()
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// Fenced, or failed otherwise, because the call's context ended.
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	if err != nil {
		var werrs kafka.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(msgs) {
			// Per message: the relay marks exactly what was written.
			perMessage := make(runtime.PublishErrors, len(msgs))
			for i, e := range werrs {
				if e == nil {
					continue
				}
				perMessage[i] = classify(p.explain(fmt.Errorf("kafka: publish to topic %q: %w", topic, e)))
			}
			return fmt.Errorf("kafka: publish %d messages to topic %q: %w", len(msgs), topic, perMessage)
		}
		return classify(p.explain(fmt.Errorf("kafka: publish %d messages to topic %q: %w", len(msgs), topic, err)))
	}
	p.logger.Debug("published messages", watermill.LogFields{
		"topic":    topic,
		"messages": len(msgs),
		"duration": time.Since(start),
	})
	return nil
}

// Ping checks that the cluster answers: it asks the bootstrap brokers
// ([PublisherConfig.Brokers]), one after the other, for their API versions
// through the writers' transport (TLS and SASL as configured), and returns
// nil at the first answer, or the errors of all of them. It is cheap (one
// round trip) and safe for concurrent use; the readiness check of
// runtime/health calls it (health.Config.Broker), so that a relay that
// cannot reach its broker is not ready.
func (p *Publisher) Ping(ctx context.Context) error {
	set := p.set.Load()
	w := set.writers[len(set.writers)-1]
	client := &kafka.Client{Transport: w.Transport}
	var errs []error
	for _, b := range p.cfg.Brokers {
		_, err := client.ApiVersions(ctx, &kafka.ApiVersionsRequest{Addr: kafka.TCP(b)})
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", b, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("kafka: ping: %w", errors.Join(errs...))
}

// explain adds to a write error the way out that kafka-go's text does not
// give: see tooLarge and missingTopic.
func (p *Publisher) explain(err error) error {
	return p.missingTopic(p.tooLarge(err))
}

// tooLarge names BatchBytes when err is kafka-go's client-side refusal of a
// record larger than it (kafka.MessageTooLargeError, nothing written),
// whose own text is the broker's MESSAGE_TOO_LARGE and sends the reader
// to the server's configuration instead.
func (p *Publisher) tooLarge(err error) error {
	var tl kafka.MessageTooLargeError
	if !errors.As(err, &tl) {
		return err
	}
	size := len(tl.Message.Key) + len(tl.Message.Value)
	for _, h := range tl.Message.Headers {
		size += len(h.Key) + len(h.Value)
	}
	return fmt.Errorf("%w (refused by this client before sending: the record, about %d bytes with its key and headers, is larger than kafka.PublisherConfig.BatchBytes %d; raise BatchBytes, keeping it at or below the broker's message.max.bytes, or refuse such events when they are written: hooks.Config.MaxEventBytes)", err, size, p.cfg.BatchBytes)
}

// missingTopic adds what to do to err when it says that the topic does not
// exist and the writer may not have the broker create it: the relay logs
// it at every attempt, and the events wait in the outbox until the topic
// exists.
func (p *Publisher) missingTopic(err error) error {
	if p.cfg.AllowAutoTopicCreation || !errors.Is(err, kafka.UnknownTopicOrPartition) {
		return err
	}
	return fmt.Errorf("%w (create the topic with the partitions it needs, or set kafka.PublisherConfig.AllowAutoTopicCreation)", err)
}

// writeContext returns a context that is done when the context of any of msgs
// is done, carrying the values of the first message's context.
func writeContext(msgs []*message.Message) (context.Context, context.CancelFunc) {
	first := msgs[0].Context()
	ctx, cancel := context.WithCancelCause(first)
	var stops []func() bool
	seen := map[<-chan struct{}]bool{first.Done(): true}
	for _, msg := range msgs[1:] {
		mctx := msg.Context()
		done := mctx.Done()
		if done == nil || seen[done] {
			continue
		}
		seen[done] = true
		if mctx.Err() != nil {
			// Already done: cancel now rather than in AfterFunc's goroutine.
			cancel(context.Cause(mctx))
			break
		}
		stops = append(stops, context.AfterFunc(mctx, func() { cancel(context.Cause(mctx)) }))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
	}
}

// writers returns the writers to publish with: the current set, unless a
// call in flight on it was abandoned (its context ended, and its caller
// may have gone on to this call), whose batches must not go out with this
// call's, or its gate closed (it refused a late produce request); that set
// is retired first.
func (p *Publisher) writers() *writerSet {
	for {
		set := p.set.Load()
		if !set.gate.Abandoned() && !set.gate.Closed() {
			return set
		}
		if !p.retire(set) {
			return set // fenced: Publish fails with ErrFenced
		}
	}
}

// retire replaces set, when it is still in use, by new writers, and
// closes it: its gate refuses every produce request from now on, and
// aborts its connections; its writers close in the background (Close waits
// for them). It reports whether set is no longer the current one.
func (p *Publisher) retire(set *writerSet) bool {
	if p.set.Load() != set {
		return true // retired already
	}
	next, err := newWriterSet(p.cfg)
	if err != nil {
		// NewPublisher built the same configuration: only an
		// OverwriteWriter that changed its mind gets here. The set is
		// fenced all the same; Publish then fails with ErrFenced.
		p.logger.Error("kafka: cannot build new writers after an abandoned publish", err, nil)
		set.gate.Close()
		return false
	}
	if !p.set.CompareAndSwap(set, next) {
		next.close() // another call retired set first
		return true
	}
	p.logger.Info("kafka: publish abandoned: its writers are retired, with what they had queued", nil)
	set.gate.Close()
	p.retiring.Add(1)
	go func() {
		defer p.retiring.Done()
		_ = set.close()
	}()
	return true
}

// close closes the set's writers.
func (s *writerSet) close() error {
	var errs []error
	for _, w := range s.writers {
		if err := w.Close(); err != nil {
			errs = append(errs, fmt.Errorf("kafka: close writer: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Close waits for in-flight Publish calls, then flushes and closes the
// writers. It is safe to call more than once and concurrently; calls after
// the first return nil at once. Publish calls made after Close return [ErrPublisherClosed].
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.set.Load().close()
	p.retiring.Wait()
	return err
}

// classify wraps err in a [*runtime.PermanentError] when retrying cannot fix
// it (permanent), in a [*runtime.TransientError] when the broker or the
// connection failed rather than the message (transient), and returns it as
// it is otherwise: an error nobody classified counts toward parking.
func classify(err error) error {
	switch {
	case permanent(err):
		return runtime.Permanent(err)
	case transient(err):
		return runtime.Transient(err)
	}
	return err
}

// transient reports whether a write error is the broker's or the
// connection's rather than the message's: a Kafka error code kafka-go
// classes as retriable (kafka.Error.Temporary: NOT_LEADER_FOR_PARTITION,
// LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
// NETWORK_EXCEPTION, KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION, ...)
// but CORRUPT_MESSAGE, which a record can earn every time; a network
// error (a refused or reset connection, a dial or I/O timeout); an EOF
// (the broker closed the connection); a context that ended (the relay's
// publish deadline). A WriteErrors is transient when every error in it is.
func transient(err error) bool {
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		n := 0
		for _, e := range werrs {
			if e == nil {
				continue
			}
			if !transient(e) {
				return false
			}
			n++
		}
		return n > 0
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary() && kerr != kafka.InvalidMessage
	}
	var nerr net.Error
	return errors.As(err, &nerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// permanent reports whether a write error is one that retrying cannot fix:
// a message larger than the writer's BatchBytes or the broker's limit, or an
// invalid topic name.
func permanent(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		for _, e := range werrs {
			if e != nil && permanent(e) {
				return true
			}
		}
		return false
	}
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.InvalidTopic) ||
		errors.Is(err, kafka.RecordListTooLarge)
}
