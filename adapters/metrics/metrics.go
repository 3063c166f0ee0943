package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/relay"
)

// Default values of the [Config] fields. A zero field means its default.
const (
	DefaultCacheFor = 5 * time.Second
	DefaultTimeout  = 2 * time.Second
)

// Default histogram buckets, in the metrics' base units.
var (
	// DefaultDurationBuckets, in seconds, for the publish, batch and
	// consumer durations: 1ms to 1 minute.
	DefaultDurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// DefaultLagBuckets, in seconds, for the commit-to-publish lag: 1ms
	// (a relay woken at commit) to an hour (a backlog after an outage).
	DefaultLagBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// DefaultBatchSizeBuckets, in messages, for the batch size.
	DefaultBatchSizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}
)

// ErrInvalidConfig is wrapped by the errors of [New] for a bad [Config].
var ErrInvalidConfig = errors.New("metrics: invalid config")

// StatsSource reports the state of an outbox: sqlstore.Store and
// runtimetest.MemoryStore implement it.
type StatsSource interface {
	Stats(ctx context.Context) (relay.Stats, error)
}

// SlotLagSource reports how far behind the database a change-data-capture
// relay's replication slot is: *pgcdc.Store (package
// runtime/sqlstore/pgcdc) implements it.
type SlotLagSource interface {
	// SlotLag returns the WAL written since the slot's confirmed position
	// (what the slot keeps from being recycled) and the age of the oldest
	// event the relay has read and not yet published (0 when none).
	SlotLag(ctx context.Context) (bytes int64, age time.Duration, err error)
}

// slotLag is a SlotLagSource's answer.
type slotLag struct {
	bytes int64
	age   time.Duration
}

// Inbox reports the size of a consumer's inbox: *consumer.Consumer
// implements it.
type Inbox interface {
	// Name is the consumer's name, the value of the consumer label.
	Name() string
	// InboxSize counts the consumer's inbox entries.
	InboxSize(ctx context.Context) (int64, error)
}

// Config configures [New]. Its zero value is valid: the relay and consumer
// metrics, without the store and inbox gauges. Negative durations are
// rejected.
type Config struct {
	// Store is asked for the outbox gauges (pending, retrying, parked,
	// oldest pending age) when the registry is scraped, at most once per
	// CacheFor. Default: nil, no outbox gauges.
	Store StatsSource

	// SlotLag is asked for the CDC relay's slot gauges
	// (outbox_cdc_slot_lag_bytes, outbox_cdc_slot_lag_seconds) when the
	// registry is scraped, at most once per CacheFor. Default: nil, no
	// slot gauges.
	SlotLag SlotLagSource

	// Inboxes are asked for their size (outbox_inbox_messages) when the
	// registry is scraped, at most once per CacheFor each. A consumer that
	// takes m.Consumer(name) as its OnOutcome is created after m: add it
	// with [Metrics.AddInbox] instead. Default: none.
	Inboxes []Inbox

	// CacheFor is how long a Store or Inbox answer (or failure) is reused
	// by later scrapes, so that frequent or concurrent scrapes, several
	// Prometheus servers say, cost the database one query per CacheFor.
	// Default: 5s ([DefaultCacheFor]).
	CacheFor time.Duration

	// Timeout bounds each Store and Inbox call made for a scrape. A call
	// that takes longer is abandoned by the scrape (its gauges are left
	// out and outbox_stats_up reports 0) and keeps running in the
	// background, one at a time per source, until its context expires: a
	// slow database never hangs /metrics. The calls of one scrape run
	// concurrently. Default: 2s ([DefaultTimeout]).
	Timeout time.Duration

	// ConstLabels are added to every metric, e.g. {"outbox": "orders"}
	// for an application with several outboxes. Default: none.
	ConstLabels prometheus.Labels

	// DurationBuckets are the buckets of the duration histograms, in
	// seconds. Default: [DefaultDurationBuckets].
	DurationBuckets []float64
	// LagBuckets are the buckets of outbox_relay_lag_seconds.
	// Default: [DefaultLagBuckets].
	LagBuckets []float64
	// BatchSizeBuckets are the buckets of outbox_relay_batch_size.
	// Default: [DefaultBatchSizeBuckets].
	BatchSizeBuckets []float64
}

func (c *Config) setDefaults() {
	if c.CacheFor == 0 {
		c.CacheFor = DefaultCacheFor
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DurationBuckets == nil {
		c.DurationBuckets = DefaultDurationBuckets
	}
	if c.LagBuckets == nil {
		c.LagBuckets = DefaultLagBuckets
	}
	if c.BatchSizeBuckets == nil {
		c.BatchSizeBuckets = DefaultBatchSizeBuckets
	}
}

// Validate reports a negative CacheFor or Timeout, a nil entry of Inboxes,
// or two inboxes of the same name, with an error wrapping
// [ErrInvalidConfig]. Zero fields are valid (they mean their defaults).
func (c Config) Validate() error {
	if c.CacheFor < 0 {
		return fmt.Errorf("%w: CacheFor %v is negative", ErrInvalidConfig, c.CacheFor)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: Timeout %v is negative", ErrInvalidConfig, c.Timeout)
	}
	seen := make(map[string]bool)
	for i, in := range c.Inboxes {
		if in == nil {
			return fmt.Errorf("%w: Inboxes[%d] is nil", ErrInvalidConfig, i)
		}
		if seen[in.Name()] {
			return fmt.Errorf("%w: Inboxes[%d]: a second inbox named %q", ErrInvalidConfig, i, in.Name())
		}
		seen[in.Name()] = true
	}
	return nil
}

// Metrics is a prometheus.Collector of an outbox's metrics (the package
// documentation lists them). Register it on a registry of your own, feed it
// with [Metrics.ObserveBatch] (relay.Config.OnBatch) and
// [Metrics.ObserveOutcome] (consumer.Config.OnOutcome). It holds no global
// state and is safe for concurrent use, by several relays and consumers.
type Metrics struct {
	cfg Config

	// Relay.
	published      *prometheus.CounterVec // topic, event_type
	failures       *prometheus.CounterVec // topic, event_type, permanent
	storeErrors    prometheus.Counter
	batchSize      prometheus.Histogram
	publishTime    prometheus.Histogram
	batchTime      prometheus.Histogram
	lag            prometheus.Histogram
	publishedMu    sync.RWMutex
	publishedByKey map[labelKey]prometheus.Counter

	// Consumer.
	outcomes       *prometheus.CounterVec   // consumer, event_type, outcome, reason
	handleDuration *prometheus.HistogramVec // consumer, outcome

	// Scrape time.
	pendingDesc, retryingDesc, parkedDesc, oldestDesc, statsUpDesc *prometheus.Desc
	inboxDesc, inboxUpDesc                                         *prometheus.Desc
	stats                                                          *cached[relay.Stats]
	inboxMu                                                        sync.Mutex
	inboxes                                                        []*cached[int64]
	inboxNames                                                     []string
	shardsDesc                                                     *prometheus.Desc
	relay                                                          atomic.Pointer[ShardHolder]
	slotBytesDesc, slotAgeDesc, slotUpDesc                         *prometheus.Desc
	slot                                                           *cached[slotLag]
}

// ShardHolder tells how many of the outbox's shards a relay holds:
// *relay.Relay implements it ([relay.Relay.ShardsHeld]).
type ShardHolder interface {
	// ShardsHeld is the count, or -1 when the relay is not running or its
	// store does not divide the outbox.
	ShardsHeld() int
}

// labelKey is a (topic, event type) pair.
type labelKey struct{ topic, eventType string }

// New returns the metrics of cfg, with its defaults applied, or an error
// wrapping [ErrInvalidConfig]. Register the result:
// reg.MustRegister(m).
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	cl := cfg.ConstLabels
	m := &Metrics{cfg: cfg, publishedByKey: make(map[labelKey]prometheus.Counter)}
	m.published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_published_total", ConstLabels: cl,
		Help: "Messages the relay published (acknowledged by the broker), by topic and event type.",
	}, []string{"topic", "event_type"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_relay_publish_failures_total", ConstLabels: cl,
		Help: "Messages the relay failed to publish, per attempt, by topic, event type and whether the failure was permanent (the message is parked).",
	}, []string{"topic", "event_type", "permanent"})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_store_errors_total", ConstLabels: cl,
		Help: "Relay rounds in which the store failed to claim or to mark.",
	})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "outbox_relay_batch_size", ConstLabels: cl, Buckets: cfg.BatchSizeBuckets,
		Help: "Messages claimed per batch.",
	})
	m.publishTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "outbox_relay_publish_duration_seconds", ConstLabels: cl, Buckets: cfg.DurationBuckets,
		Help: "Time to publish one batch, from the first Publish call to the broker's last answer.",
	})
	m.batchTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "outbox_relay_batch_duration_seconds", ConstLabels: cl, Buckets: cfg.DurationBuckets,
		Help: "Time of one relay batch, from its round's start to its mark's end: claim, publish and mark.",
	})
	m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "outbox_relay_lag_seconds", ConstLabels: cl, Buckets: cfg.LagBuckets,
		Help: "Time from a message's commit (its created_at) to the broker's acknowledgement, per published message.",
	})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_consumer_messages_total", ConstLabels: cl,
		Help: "Deliveries handled by a consumer, by consumer, event type, outcome and reason.",
	}, []string{"consumer", "event_type", "outcome", "reason"})
	m.handleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "outbox_consumer_handle_duration_seconds", ConstLabels: cl, Buckets: cfg.DurationBuckets,
		Help: "Time a consumer took to handle one delivery (decode, handler and inbox transaction, retries), by consumer and outcome.",
	}, []string{"consumer", "outcome"})

	m.pendingDesc = prometheus.NewDesc("outbox_pending_messages", "Messages waiting to be published (not parked), at the last store query.", nil, cl)
	m.retryingDesc = prometheus.NewDesc("outbox_retrying_messages", "Pending messages with a failed attempt counted (a broker outage counts none), at the last store query.", nil, cl)
	m.parkedDesc = prometheus.NewDesc("outbox_parked_messages", "Messages parked after a permanent failure or too many attempts, at the last store query.", nil, cl)
	m.oldestDesc = prometheus.NewDesc("outbox_oldest_pending_age_seconds", "Age of the oldest pending message (0 when none), at the last store query.", nil, cl)
	m.statsUpDesc = prometheus.NewDesc("outbox_stats_up", "1 when the last store query for the outbox gauges succeeded within the timeout, 0 otherwise.", nil, cl)
	m.inboxDesc = prometheus.NewDesc("outbox_inbox_messages", "Entries in a consumer's inbox (applied events not pruned yet), at the last count.", []string{"consumer"}, cl)
	m.inboxUpDesc = prometheus.NewDesc("outbox_inbox_stats_up", "1 when the last count of a consumer's inbox succeeded within the timeout, 0 otherwise.", []string{"consumer"}, cl)
	m.shardsDesc = prometheus.NewDesc("outbox_relay_shards_held", "Shards of the outbox this relay holds (0: standing by), at its last claim.", nil, cl)
	m.slotBytesDesc = prometheus.NewDesc("outbox_cdc_slot_lag_bytes", "WAL written since the CDC relay's replication slot's confirmed position: what the slot keeps, at the last query.", nil, cl)
	m.slotAgeDesc = prometheus.NewDesc("outbox_cdc_slot_lag_seconds", "Age of the oldest event the CDC relay has read and not yet published (0 when none), at the last query.", nil, cl)
	m.slotUpDesc = prometheus.NewDesc("outbox_cdc_slot_stats_up", "1 when the last query for the slot gauges succeeded within the timeout, 0 otherwise.", nil, cl)
	if cfg.Store != nil {
		m.stats = &cached[relay.Stats]{fetch: cfg.Store.Stats}
	}
	if cfg.SlotLag != nil {
		src := cfg.SlotLag
		m.slot = &cached[slotLag]{fetch: func(ctx context.Context) (slotLag, error) {
			b, a, err := src.SlotLag(ctx)
			return slotLag{b, a}, err
		}}
	}
	for _, in := range cfg.Inboxes {
		m.inboxes = append(m.inboxes, &cached[int64]{fetch: in.InboxSize})
		m.inboxNames = append(m.inboxNames, in.Name())
	}
	return m, nil
}

// AddInbox adds an inbox to those whose size the scrapes report, as
// [Config.Inboxes] does; it may be called after m is registered. It returns
// an error wrapping [ErrInvalidConfig] for a nil inbox or a name already
// added.
func (m *Metrics) AddInbox(in Inbox) error {
	if in == nil {
		return fmt.Errorf("%w: nil inbox", ErrInvalidConfig)
	}
	m.inboxMu.Lock()
	defer m.inboxMu.Unlock()
	for _, name := range m.inboxNames {
		if name == in.Name() {
			return fmt.Errorf("%w: a second inbox named %q", ErrInvalidConfig, name)
		}
	}
	m.inboxes = append(m.inboxes, &cached[int64]{fetch: in.InboxSize})
	m.inboxNames = append(m.inboxNames, in.Name())
	return nil
}

// SetRelay has m export r's shards as outbox_relay_shards_held (0 on a
// relay standing by, every shard on the one that publishes by default),
// read at each scrape and absent while r says -1. The relay is created
// after m when m.ObserveBatch is its OnBatch, hence a setter; a second
// call replaces the first.
func (m *Metrics) SetRelay(r ShardHolder) error {
	if r == nil {
		return fmt.Errorf("%w: nil relay", ErrInvalidConfig)
	}
	m.relay.Store(&r)
	return nil
}

// collectors are the metrics m updates as events happen.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.published, m.failures, m.storeErrors, m.batchSize, m.publishTime, m.batchTime, m.lag, m.outcomes, m.handleDuration}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	if m.stats != nil {
		for _, d := range []*prometheus.Desc{m.pendingDesc, m.retryingDesc, m.parkedDesc, m.oldestDesc, m.statsUpDesc} {
			ch <- d
		}
	}
	if m.slot != nil {
		for _, d := range []*prometheus.Desc{m.slotBytesDesc, m.slotAgeDesc, m.slotUpDesc} {
			ch <- d
		}
	}
	ch <- m.inboxDesc // described even without inboxes: AddInbox may add some
	ch <- m.inboxUpDesc
	ch <- m.shardsDesc // SetRelay may come later
}

// Collect implements prometheus.Collector. It queries the store and the
// inboxes, concurrently, unless their last answer is younger than
// [Config.CacheFor]; each query is bounded by [Config.Timeout].
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	if r := m.relay.Load(); r != nil {
		if n := (*r).ShardsHeld(); n >= 0 {
			ch <- prometheus.MustNewConstMetric(m.shardsDesc, prometheus.GaugeValue, float64(n))
		}
	}
	var wg sync.WaitGroup
	if m.stats != nil {
		wg.Go(func() {
			st, ok := m.stats.get(m.cfg.CacheFor, m.cfg.Timeout)
			if ok {
				ch <- prometheus.MustNewConstMetric(m.pendingDesc, prometheus.GaugeValue, float64(st.Pending))
				ch <- prometheus.MustNewConstMetric(m.retryingDesc, prometheus.GaugeValue, float64(st.Retrying))
				ch <- prometheus.MustNewConstMetric(m.parkedDesc, prometheus.GaugeValue, float64(st.Parked))
				ch <- prometheus.MustNewConstMetric(m.oldestDesc, prometheus.GaugeValue, st.OldestPending.Seconds())
			}
			ch <- prometheus.MustNewConstMetric(m.statsUpDesc, prometheus.GaugeValue, up(ok))
		})
	}
	if m.slot != nil {
		wg.Go(func() {
			l, ok := m.slot.get(m.cfg.CacheFor, m.cfg.Timeout)
			if ok {
				ch <- prometheus.MustNewConstMetric(m.slotBytesDesc, prometheus.GaugeValue, float64(l.bytes))
				ch <- prometheus.MustNewConstMetric(m.slotAgeDesc, prometheus.GaugeValue, l.age.Seconds())
			}
			ch <- prometheus.MustNewConstMetric(m.slotUpDesc, prometheus.GaugeValue, up(ok))
		})
	}
	m.inboxMu.Lock()
	inboxes, names := m.inboxes, m.inboxNames
	m.inboxMu.Unlock()
	for i, in := range inboxes {
		wg.Go(func() {
			n, ok := in.get(m.cfg.CacheFor, m.cfg.Timeout)
			if ok {
				ch <- prometheus.MustNewConstMetric(m.inboxDesc, prometheus.GaugeValue, float64(n), names[i])
			}
			ch <- prometheus.MustNewConstMetric(m.inboxUpDesc, prometheus.GaugeValue, up(ok), names[i])
		})
	}
	wg.Wait()
}

func up(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// ObserveBatch records one relay round. Set it as relay.Config.OnBatch
// (calling it from your own OnBatch if you have one). It counts the
// published and failed messages by topic and event type, observes the batch
// size, the publish and round durations, and each published message's lag
// from its CreatedAt to [relay.BatchResult.PublishedAt]. A negative lag
// (the database's clock ahead of the relay's) counts as 0.
func (m *Metrics) ObserveBatch(res relay.BatchResult) {
	if res.Err != nil {
		m.storeErrors.Inc()
	}
	if res.Claimed == 0 {
		return
	}
	m.batchSize.Observe(float64(res.Claimed))
	m.batchTime.Observe(res.Duration.Seconds())
	if res.PublishDuration > 0 {
		m.publishTime.Observe(res.PublishDuration.Seconds())
	}
	var failed map[int64]relay.Failure
	if len(res.Failures) > 0 {
		failed = make(map[int64]relay.Failure, len(res.Failures))
		for _, f := range res.Failures {
			failed[f.ID] = f
		}
	}
	// Count per (topic, event type) first, then add each count once.
	counts := make(map[labelKey]int, 8)
	for i := range res.Messages {
		msg := &res.Messages[i]
		if f, ok := failed[msg.ID]; ok {
			m.failures.WithLabelValues(msg.Topic, msg.EventType, boolLabel(f.Permanent)).Inc()
			continue
		}
		counts[labelKey{msg.Topic, msg.EventType}]++
		if !msg.CreatedAt.IsZero() {
			m.lag.Observe(max(res.PublishedAt.Sub(msg.CreatedAt), 0).Seconds())
		}
	}
	for k, n := range counts {
		m.publishedCounter(k).Add(float64(n))
	}
}

// publishedCounter returns the published counter of k, cached.
func (m *Metrics) publishedCounter(k labelKey) prometheus.Counter {
	m.publishedMu.RLock()
	c, ok := m.publishedByKey[k]
	m.publishedMu.RUnlock()
	if ok {
		return c
	}
	c = m.published.WithLabelValues(k.topic, k.eventType)
	m.publishedMu.Lock()
	m.publishedByKey[k] = c
	m.publishedMu.Unlock()
	return c
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// ObserveOutcome records one consumer delivery of the consumer named name:
// it counts the outcome and reason by event type and observes the delivery's
// duration (for a message that consumer.Consumer.Run applied in a batch,
// the batch's transaction: each message of the batch waited that long).
// Set consumer.Config.OnOutcome to m.Consumer(name) rather than calling it
// directly.
//
// The event_type label is empty for a malformed message or an unknown event
// type, so that a producer's mistakes cannot multiply the label values.
func (m *Metrics) ObserveOutcome(name string, res consumer.Result) {
	eventType := res.Meta.EventType
	if res.Reason == consumer.ReasonMalformed || res.Reason == consumer.ReasonUnknownType {
		eventType = ""
	}
	outcome := res.Outcome.String()
	m.outcomes.WithLabelValues(name, eventType, outcome, string(res.Reason)).Inc()
	m.handleDuration.WithLabelValues(name, outcome).Observe(res.Duration.Seconds())
}

// Consumer returns the consumer.Config.OnOutcome function of the consumer
// named name (its consumer.Config.Name): it calls [Metrics.ObserveOutcome].
func (m *Metrics) Consumer(name string) func(consumer.Result) {
	return func(res consumer.Result) { m.ObserveOutcome(name, res) }
}

// cached is a value fetched at scrape time and reused for a while.
type cached[T any] struct {
	fetch func(context.Context) (T, error)

	mu       sync.Mutex
	val      T
	ok       bool          // the last fetch succeeded
	at       time.Time     // when the last fetch ended; zero before the first
	inflight chan struct{} // closed when the running fetch ends; nil when none runs
}

// get returns the cached value when it is younger than cacheFor, and
// otherwise fetches it (or joins the fetch in progress), waiting at most
// timeout. ok is false when the fetch failed or did not end in time.
func (c *cached[T]) get(cacheFor, timeout time.Duration) (v T, ok bool) {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < cacheFor {
		defer c.mu.Unlock()
		return c.val, c.ok
	}
	done := c.inflight
	if done == nil {
		done = make(chan struct{})
		c.inflight = done
		go c.refresh(done, timeout)
	}
	c.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.val, c.ok
	case <-t.C:
		var zero T
		return zero, false
	}
}

// refresh fetches the value under timeout and stores it; it closes done
// when it has.
func (c *cached[T]) refresh(done chan struct{}, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	v, err := c.fetch(ctx)
	cancel()
	c.mu.Lock()
	c.val, c.ok, c.at, c.inflight = v, err == nil, time.Now(), nil
	c.mu.Unlock()
	close(done)
}
