package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/internal/backoff"
)

// SubscriberConfig configures a [Subscriber]. Brokers and ConsumerGroup are
// required; every other field's zero value means the documented default.
// The timing fields map to the kafka-go ReaderConfig fields of the same name.
type SubscriberConfig struct {
	// Brokers lists the bootstrap broker addresses ("host:port"). Required.
	Brokers []string

	// ConsumerGroup is the Kafka consumer group id. Subscribers (and Subscribe
	// calls) in the same group share a topic's partitions; each group gets
	// every message. Required.
	ConsumerGroup string

	// StartOffset is where a group starts on a partition that has no
	// committed offset: kafka.FirstOffset (the oldest retained record) or
	// kafka.LastOffset (only records written after the group joined).
	//
	// Default: kafka.FirstOffset.
	StartOffset int64

	// MinBytes is the least data, in bytes, a fetch waits for (up to
	// MaxWait) before the broker answers.
	//
	// Default: 1.
	MinBytes int

	// MaxBytes is the most data, in bytes, one fetch returns per partition.
	// The broker still returns a record larger than this on its own.
	//
	// Default: 1 MB (1e6, kafka-go's default).
	MaxBytes int

	// MaxWait is how long a fetch waits for MinBytes. Closing a subscription
	// can take this long.
	//
	// Default: 1s (kafka-go's own default is 10s).
	MaxWait time.Duration

	// HeartbeatInterval is how often a group member heartbeats; members that
	// join later get partitions after about one interval.
	//
	// Default: 3s.
	HeartbeatInterval time.Duration

	// SessionTimeout is how long the group coordinator waits for a heartbeat
	// before it evicts a member and moves its partitions. Brokers reject
	// values below their group.min.session.timeout.ms (6s by default).
	// Offsets of acked messages are committed within this time or not at all.
	//
	// Default: 30s.
	SessionTimeout time.Duration

	// RebalanceTimeout is how long the coordinator waits for members to
	// rejoin during a rebalance. Closing a subscription whose reader is
	// joining the group can take this long.
	//
	// Default: 30s.
	RebalanceTimeout time.Duration

	// NackResendSleep is how long a subscription waits after a Nack before it
	// delivers the same message again. Watermill's Retry middleware is the
	// usual place for backoff; this only slows down a tight nack loop.
	//
	// Default: 0 (deliver again at once).
	NackResendSleep time.Duration

	// SerialPartitions makes [Subscriber.Subscribe] deliver one message at
	// a time across all the partitions assigned to a subscription: the
	// next message is sent only after the current one is acked or nacked,
	// and an ack is committed (kafka-go CommitMessages) before the next is
	// sent, so a message nacked again and again holds back every partition
	// of the subscription. It is what Subscribe did before partitions were
	// delivered in parallel by default: use it where a handler must never
	// run two messages at once, whatever their partitions.
	//
	// By default (false), each partition assigned to a subscription has a
	// goroutine that sends its next message only after the current one is
	// acked or nacked: the subscription has up to one message per
	// partition unacked at once, each partition keeps its order (and so
	// each key, and each aggregate, its order), and a partition stuck on a
	// nacked or unacked message holds back only itself. Each partition is
	// fetched by a reader of its own (see [Subscriber.SubscribePartitions]),
	// and acks are committed in offset order in the background. A
	// Watermill router handles the messages of one subscription
	// concurrently (it waits for nothing but the subscriber), so one
	// router handler applies several partitions at once, as with
	// Watermill's own Kafka subscriber, which consumes each partition of a
	// group member in a goroutine of its own.
	//
	// Default: false (partitions in parallel).
	SerialPartitions bool

	// ParallelPartitions asked for what is now the default: partitions
	// delivered in parallel. It is ignored.
	//
	// Deprecated: partitions are delivered in parallel unless
	// SerialPartitions is set.
	ParallelPartitions bool

	// PartitionWindow is how many messages of one partition
	// [Subscriber.SubscribePartitions] hands out before the first of them
	// is acked, and how many fetched records of a partition wait for their
	// turn (with ParallelPartitions, or in SubscribePartitions) before
	// fetching pauses for that partition (only).
	//
	// Default: 1000 ([DefaultPartitionWindow]).
	PartitionWindow int

	// TopicPartitions is the partition count [Subscriber.SubscribeInitialize]
	// gives a topic it creates. Partitions bound the group's parallelism.
	//
	// Default: 1.
	TopicPartitions int

	// TopicReplicationFactor is the replication factor
	// [Subscriber.SubscribeInitialize] gives a topic it creates; use 3 on a
	// production cluster.
	//
	// Default: 1.
	TopicReplicationFactor int

	// OverwriteReaderConfig, if set, is called with the kafka-go ReaderConfig
	// of every Subscribe call (after this config has been applied), to set
	// what this config does not expose: Dialer (TLS, SASL, client id),
	// GroupBalancers, QueueCapacity, JoinGroupBackoff, CommitInterval,
	// IsolationLevel, loggers, ... The Dialer it sets is also used by
	// SubscribeInitialize. GroupID and Topic are reset afterwards: they come
	// from ConsumerGroup and the Subscribe call.
	//
	// A CommitInterval above 0 makes commits asynchronous (batched), which is
	// faster but widens the window of redelivery after a crash; it is used
	// only with SerialPartitions. By default and in SubscribePartitions,
	// which commit in the background anyway, it is not used: there the group settings
	// (GroupBalancers, HeartbeatInterval, SessionTimeout, RebalanceTimeout,
	// JoinGroupBackoff, RetentionTime, WatchPartitionChanges,
	// PartitionWatchInterval, StartOffset) go to a kafka-go ConsumerGroup,
	// the Dialer and loggers to it and to the readers, and the rest to the
	// reader that fetches each assigned partition.
	//
	// Default: nil (no change).
	OverwriteReaderConfig func(rc *kafka.ReaderConfig)

	// Logger receives the adapter's logs: Watermill's messages, levels and
	// fields, bridged once inside with watermill.NewSlogLogger.
	// Default: nil, which means slog.Default() as it is when [NewSubscriber] is
	// called, as in runtime/relay and runtime/consumer. Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (c *SubscriberConfig) setDefaults() {
	if c.StartOffset == 0 {
		c.StartOffset = kafka.FirstOffset
	}
	if c.MinBytes == 0 {
		c.MinBytes = 1
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 1e6
	}
	if c.MaxWait == 0 {
		c.MaxWait = time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = defaultHeartbeatInterval
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = defaultSessionTimeout
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = 30 * time.Second
	}
	if c.TopicPartitions == 0 {
		c.TopicPartitions = 1
	}
	if c.PartitionWindow == 0 {
		c.PartitionWindow = DefaultPartitionWindow
	}
	if c.TopicReplicationFactor == 0 {
		c.TopicReplicationFactor = 1
	}
}

// The defaults of SubscriberConfig.HeartbeatInterval and SessionTimeout.
const (
	defaultHeartbeatInterval = 3 * time.Second
	defaultSessionTimeout    = 30 * time.Second
)

// Validate reports whether c is usable. Zero values other than Brokers and
// ConsumerGroup are valid, since they mean the default. The error wraps
// [ErrInvalidConfig].
func (c SubscriberConfig) Validate() error {
	if err := validateBrokers(c.Brokers); err != nil {
		return err
	}
	if c.ConsumerGroup == "" {
		return fmt.Errorf("%w: no ConsumerGroup", ErrInvalidConfig)
	}
	if c.StartOffset != 0 && c.StartOffset != kafka.FirstOffset && c.StartOffset != kafka.LastOffset {
		return fmt.Errorf("%w: StartOffset %d is neither kafka.FirstOffset nor kafka.LastOffset", ErrInvalidConfig, c.StartOffset)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MinBytes", int64(c.MinBytes)},
		{"MaxBytes", int64(c.MaxBytes)},
		{"MaxWait", int64(c.MaxWait)},
		{"HeartbeatInterval", int64(c.HeartbeatInterval)},
		{"SessionTimeout", int64(c.SessionTimeout)},
		{"RebalanceTimeout", int64(c.RebalanceTimeout)},
		{"NackResendSleep", int64(c.NackResendSleep)},
		{"PartitionWindow", int64(c.PartitionWindow)},
		{"TopicPartitions", int64(c.TopicPartitions)},
		{"TopicReplicationFactor", int64(c.TopicReplicationFactor)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: negative %s", ErrInvalidConfig, f.name)
		}
	}
	if c.MaxBytes != 0 && c.MinBytes > c.MaxBytes {
		return fmt.Errorf("%w: MinBytes %d > MaxBytes %d", ErrInvalidConfig, c.MinBytes, c.MaxBytes)
	}
	// As setDefaults will make them: a member that heartbeats no more
	// often than the coordinator's session timeout is dropped from the
	// group between two heartbeats, and rejoins, again and again.
	hb, session := cmp.Or(c.HeartbeatInterval, defaultHeartbeatInterval), cmp.Or(c.SessionTimeout, defaultSessionTimeout)
	if hb >= session {
		return fmt.Errorf("%w: HeartbeatInterval %s is not shorter than SessionTimeout %s (Kafka advises at most a third of it)", ErrInvalidConfig, hb, session)
	}
	return nil
}

// Subscriber is a Watermill [message.Subscriber] that consumes Kafka topics
// as a member of a consumer group. Every Subscribe call joins the group as a
// member of its own (a kafka-go ConsumerGroup and a Reader per assigned
// partition; with SerialPartitions, one kafka-go Reader), so two calls
// for the same topic are two members sharing its partitions. It is safe for
// concurrent use.
//
// Subscriber also implements [message.SubscribeInitializer]: see
// [Subscriber.SubscribeInitialize].
type Subscriber struct {
	cfg    SubscriberConfig
	logger watermill.LoggerAdapter
	// warn logs a partition held back by its stuck stream (Watermill's
	// logger has no WARN level), after stallWarnAfter.
	warn           *slog.Logger
	stallWarnAfter time.Duration

	// closing is cancelled by Close; every subscription's context derives
	// from it.
	closing     context.Context
	closeCancel context.CancelFunc

	mu     sync.Mutex // guards closed and the Add side of wg
	closed bool
	wg     sync.WaitGroup // one per running subscription
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber configured by cfg. It logs to
// cfg.Logger. It does not contact the brokers; Subscribe does. The error
// wraps [ErrInvalidConfig] when cfg is invalid.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	cfg.Brokers = slices.Clone(cfg.Brokers)
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := watermill.NewSlogLogger(cfg.Logger) // nil means slog.Default()
	// Check the reader config once now, so a bad OverwriteReaderConfig fails
	// here rather than in every Subscribe.
	warn := cfg.Logger
	if warn == nil {
		warn = slog.Default()
	}
	s := &Subscriber{
		cfg:            cfg,
		logger:         logger.With(watermill.LogFields{"component": "kafka_subscriber", "consumer_group": cfg.ConsumerGroup}),
		warn:           warn.With("component", "kafka_subscriber", "consumer_group", cfg.ConsumerGroup),
		stallWarnAfter: defaultStallWarnAfter,
	}
	rc := s.readerConfig("validate")
	if err := rc.Validate(); err != nil {
		return nil, fmt.Errorf("%w: reader config: %v", ErrInvalidConfig, err)
	}
	s.closing, s.closeCancel = context.WithCancel(context.Background())
	return s, nil
}

// readerConfig returns the kafka-go reader settings of a subscription to
// topic.
func (s *Subscriber) readerConfig(topic string) kafka.ReaderConfig {
	rc := kafka.ReaderConfig{
		Brokers:           slices.Clone(s.cfg.Brokers),
		StartOffset:       s.cfg.StartOffset,
		MinBytes:          s.cfg.MinBytes,
		MaxBytes:          s.cfg.MaxBytes,
		MaxWait:           s.cfg.MaxWait,
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		SessionTimeout:    s.cfg.SessionTimeout,
		RebalanceTimeout:  s.cfg.RebalanceTimeout,
		// kafka-go reports here what it retries itself: a failed group
		// join, heartbeat, fetch or commit. WARN, as the relay and the
		// consumer log what they retry, so that a member that cannot join
		// its group is not silent at the usual production level.
		ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
			s.warn.Warn("kafka-go reader error", "topic", topic, "error", fmt.Sprintf(format, args...))
		}),
	}
	if s.cfg.OverwriteReaderConfig != nil {
		s.cfg.OverwriteReaderConfig(&rc)
	}
	rc.GroupID = s.cfg.ConsumerGroup
	rc.GroupTopics = nil
	rc.Topic = topic
	rc.Partition = 0
	return rc
}

// Subscribe joins the consumer group for topic and returns a channel of its
// messages. It does not block: the group join happens in the background.
//
// Each partition assigned to the subscription is delivered in order, one
// message at a time: a partition's next message is sent only after its
// current one is acked or nacked, while the other partitions go on, so a
// Watermill router handles up to one message per partition at once and a
// message nacked again and again holds back only its partition. Ack
// commits the record's offset (in the background, each partition's acks
// in offset order) and cancels the message's context; Nack delivers the
// same record again as a new message, after
// [SubscriberConfig.NackResendSleep]. With
// [SubscriberConfig.SerialPartitions], one message at a time across all
// the partitions, each ack committed (kafka-go CommitMessages) before the
// next message is sent.
// A message's context carries the values of ctx, and the record's topic,
// partition, offset, key and time ([RecordInfoFromContext]).
//
// The channel is closed when ctx is done or [Subscriber.Close] is called; an
// unacked message is then neither committed nor lost, and the group delivers
// it again later. Subscribe returns [ErrSubscriberClosed] after Close.
//
// Delivery is at least once. A message still being handled when its
// partition moves to another member is delivered there too, and its late
// ack can move the group's offset back, so later records are delivered
// again; consumers deduplicate on the message UUID (runtime/consumer's inbox
// does).
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if !s.cfg.SerialPartitions {
		return s.subscribeParallel(ctx, topic)
	}
	if topic == "" {
		return nil, errors.New("kafka: subscribe: empty topic")
	}
	rc := s.readerConfig(topic)
	if err := rc.Validate(); err != nil {
		return nil, fmt.Errorf("kafka: subscribe to %q: %w", topic, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrSubscriberClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	reader := kafka.NewReader(rc)
	out := make(chan *message.Message)
	logger := s.logger.With(watermill.LogFields{"topic": topic})

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	go func() {
		defer s.wg.Done()
		s.consume(ctx, reader, out, logger, rc.ReadBackoffMax)
		stop()
		cancel()
		// Close the channel first: the reader can take a while to leave the
		// group, and the consumer need not wait for that.
		close(out)
		// Reader.Close leaves the group and always returns nil.
		_ = reader.Close()
		logger.Debug("subscription closed", nil)
	}()
	logger.Debug("subscribed", nil)
	return out, nil
}

// consume delivers the reader's records to out until ctx is done.
func (s *Subscriber) consume(ctx context.Context, reader *kafka.Reader, out chan<- *message.Message, logger watermill.LoggerAdapter, backoff time.Duration) {
	for {
		record, ok := fetch(ctx, reader, s.warn.With("topic", reader.Config().Topic), backoff)
		if !ok || !s.deliver(ctx, reader, record, out, logger) {
			return
		}
	}
}

// fetch returns the reader's next record, or false when ctx is done first.
// A failed fetch is logged at WARN on warn (a failure the subscriber
// handles: a broker that cannot be reached, a rejected session timeout)
// and tried again after delay (default 1s): kafka-go retries internally,
// so what reaches us is an error that outlived its retries.
func fetch(ctx context.Context, reader *kafka.Reader, warn *slog.Logger, delay time.Duration) (kafka.Message, bool) {
	if delay <= 0 {
		delay = time.Second
	}
	for {
		record, err := reader.FetchMessage(ctx)
		if err == nil {
			return record, true
		}
		if ctx.Err() != nil {
			return kafka.Message{}, false
		}
		warn.Warn("kafka: fetch failed, trying again", "error", err.Error(), "backoff", delay)
		if !backoff.Sleep(ctx, delay) {
			return kafka.Message{}, false
		}
	}
}

// deliver sends record to out until it is acked, then commits it. It
// reports false when ctx is done first.
func (s *Subscriber) deliver(ctx context.Context, reader *kafka.Reader, record kafka.Message, out chan<- *message.Message, logger watermill.LoggerAdapter) bool {
	fields := watermill.LogFields{
		"partition": record.Partition,
		"offset":    record.Offset,
	}
	for {
		msg := fromRecord(record)
		msgCtx, msgCancel := context.WithCancel(withRecordInfo(ctx, record))
		msg.SetContext(msgCtx)
		fields["message_uuid"] = msg.UUID

		select {
		case out <- msg:
		case <-ctx.Done():
			msgCancel()
			return false
		}
		logger.Trace("message delivered", fields)

		select {
		case <-msg.Acked():
			msgCancel()
			s.commit(ctx, reader, record, logger, fields)
			return true
		case <-msg.Nacked():
			msgCancel()
			logger.Trace("message nacked, delivering it again", fields)
			if s.cfg.NackResendSleep > 0 && !backoff.Sleep(ctx, s.cfg.NackResendSleep) {
				return false
			}
		case <-ctx.Done():
			msgCancel()
			return false
		}
	}
}

// commit commits record's offset. It runs even when the subscription is
// closing, so an acked message is not redelivered needlessly, but gives up
// after the session timeout: by then the group has moved the partition.
func (s *Subscriber) commit(ctx context.Context, reader *kafka.Reader, record kafka.Message, logger watermill.LoggerAdapter, fields watermill.LogFields) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.SessionTimeout)
	defer cancel()
	if err := reader.CommitMessages(cctx, record); err != nil {
		// The handler's work is done; a failed commit (usually a rebalance)
		// only means the message will be delivered again.
		logger.Info("commit failed, the message may be delivered again", fields.Add(watermill.LogFields{"error": err.Error()}))
		return
	}
	logger.Trace("message acked and committed", fields)
}

// SubscribeInitialize creates topic with [SubscriberConfig.TopicPartitions]
// partitions and [SubscriberConfig.TopicReplicationFactor] replicas if it
// does not exist yet; an existing topic is left as it is. It talks to the
// cluster's controller through the reader's Dialer (see
// [SubscriberConfig.OverwriteReaderConfig]) and blocks for up to 30 seconds.
// Watermill's router does not call it; call it yourself, or create topics
// with your usual tooling.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if topic == "" {
		return errors.New("kafka: subscribe initialize: empty topic")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrSubscriberClosed
	}

	ctx, cancel := context.WithTimeout(s.closing, 30*time.Second)
	defer cancel()
	dialer := s.readerConfig(topic).Dialer
	if dialer == nil {
		dialer = kafka.DefaultDialer
	}
	if err := createTopic(ctx, dialer, s.cfg.Brokers, kafka.TopicConfig{
		Topic:             topic,
		NumPartitions:     s.cfg.TopicPartitions,
		ReplicationFactor: s.cfg.TopicReplicationFactor,
	}); err != nil {
		return fmt.Errorf("kafka: create topic %q: %w", topic, err)
	}
	return nil
}

// createTopic asks the cluster's controller to create tc, ignoring
// TopicAlreadyExists. It asks the brokers in turn for the controller.
func createTopic(ctx context.Context, dialer *kafka.Dialer, brokers []string, tc kafka.TopicConfig) error {
	var errs []error
	for _, broker := range brokers {
		controller, err := findController(ctx, dialer, broker)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(controller.Host, strconv.Itoa(controller.Port)))
		if err != nil {
			return fmt.Errorf("dial controller: %w", err)
		}
		defer conn.Close()
		if deadline, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(deadline)
		}
		if err := conn.CreateTopics(tc); err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return err
		}
		return nil
	}
	return errors.Join(errs...)
}

// findController asks broker which broker is the controller.
func findController(ctx context.Context, dialer *kafka.Dialer, broker string) (kafka.Broker, error) {
	conn, err := dialer.DialContext(ctx, "tcp", broker)
	if err != nil {
		return kafka.Broker{}, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	return conn.Controller()
}

// Close ends every subscription, closing their channels, and waits until
// their readers have left the group. That takes up to MaxWait, up to
// RebalanceTimeout when a reader is joining the group (kafka-go cannot
// interrupt a join), and up to SessionTimeout when the commit of an acked
// message is in flight. Messages that were delivered but not acked are not
// committed; their contexts are cancelled. Close is safe to call more than
// once and concurrently; every call returns nil once the subscriptions are
// gone.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeCancel()
	s.wg.Wait()
	return nil
}

// RecordInfo describes the Kafka record a received message was read from.
type RecordInfo struct {
	// Topic, Partition and Offset are the record's position.
	Topic     string
	Partition int
	Offset    int64
	// Key is the record's key; nil when it had none.
	Key []byte
	// Time is the record's timestamp (the producer's send time unless the
	// topic uses log-append time).
	Time time.Time
}

type recordInfoKey struct{}

func withRecordInfo(ctx context.Context, r kafka.Message) context.Context {
	return context.WithValue(ctx, recordInfoKey{}, RecordInfo{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Key:       r.Key,
		Time:      r.Time,
	})
}

// RecordInfoFromContext returns the record a message delivered by a
// [Subscriber] was read from; pass it msg.Context(). It reports false for
// any other context.
func RecordInfoFromContext(ctx context.Context) (RecordInfo, bool) {
	ri, ok := ctx.Value(recordInfoKey{}).(RecordInfo)
	return ri, ok
}
