package metrics_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/glebarez/go-sqlite" // the "sqlite" database/sql driver
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/adapters/metrics"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// rejecting fails every Publish to topic "bad" for good, and passes the
// others to the broker.
type rejecting struct{ message.Publisher }

func (p rejecting) Publish(topic string, msgs ...*message.Message) error {
	if topic == "bad" {
		return runtime.Permanent(errors.New("topic bad does not exist"))
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestScrape runs a relay and a consumer with the metrics on, then scrapes
// the registry over HTTP and checks every value that the run determines.
func TestScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now()

	// The outbox: 3 order_paid and 2 order_shipped for "orders", and one
	// message for a topic the broker refuses (it is parked).
	store := &runtimetest.MemoryStore{}
	var msgs []runtime.OutboxMessage
	for i, id := range []string{"A-1", "A-2", "A-3"} {
		msgs = append(msgs, outboxMessage(t, "orders", OrderPaid{1, now, id}, id))
		if i < 2 {
			msgs = append(msgs, outboxMessage(t, "orders", OrderShipped{1, now, id}, id))
		}
	}
	msgs = append(msgs, outboxMessage(t, "bad", OrderPaid{1, now, "B-1"}, "B-1"))
	store.Add(msgs...)

	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "billing.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	drv := databasesql.New(db)
	if err := consumer.Migrate(ctx, drv, ""); err != nil {
		t.Fatal(err)
	}

	m, err := metrics.New(metrics.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	billing, err := consumer.New(registry(t), consumer.Config{Name: "billing", DB: drv, OnOutcome: m.Consumer("billing"), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	// order_paid is applied through the inbox; order_shipped has no
	// handler (ignored).
	if err := consumer.Handle(billing, drv, func(context.Context, *sql.Tx, OrderPaid, consumer.Meta) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := m.AddInbox(billing); err != nil {
		t.Fatal(err)
	}
	if err := m.AddInbox(billing); !errors.Is(err, metrics.ErrInvalidConfig) {
		t.Errorf("AddInbox of the same name again = %v, want ErrInvalidConfig", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	broker, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	received, err := broker.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var batches atomic.Int32
	r, err := relay.New(store, rejecting{broker}, relay.Config{
		PollInterval: time.Hour, Logger: discard(),
		OnBatch: func(res relay.BatchResult) { batches.Add(1); m.ObserveBatch(res) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = r.Run(ctx) })

	// Consume the five messages, then a redelivery of the first.
	var first *message.Message
	for i := range 5 {
		var msg *message.Message
		select {
		case msg = <-received:
		case <-time.After(waitTimeout):
			t.Fatalf("received %d messages, want 5", i)
		}
		if first == nil {
			first = msg.Copy()
		}
		if err := billing.HandlerFunc()(msg); err != nil {
			t.Fatal(err)
		}
		msg.Ack()
	}
	if err := billing.HandlerFunc()(first); err != nil {
		t.Fatal(err)
	}
	until(t, "the bad message parked", func() bool {
		st, _ := store.Stats(ctx)
		return st.Pending == 0 && st.Parked == 1
	})
	cancel()
	wg.Wait()

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	const want = `
# HELP outbox_consumer_messages_total Deliveries handled by a consumer, by consumer, event type, outcome and reason.
# TYPE outbox_consumer_messages_total counter
outbox_consumer_messages_total{consumer="billing",event_type="orders.order_paid",outcome="applied",reason=""} 3
outbox_consumer_messages_total{consumer="billing",event_type="orders.order_paid",outcome="duplicate",reason=""} 1
outbox_consumer_messages_total{consumer="billing",event_type="orders.order_shipped",outcome="ignored",reason=""} 2
# HELP outbox_inbox_messages Entries in a consumer's inbox (applied events not pruned yet), at the last count.
# TYPE outbox_inbox_messages gauge
outbox_inbox_messages{consumer="billing"} 3
# HELP outbox_inbox_stats_up 1 when the last count of a consumer's inbox succeeded within the timeout, 0 otherwise.
# TYPE outbox_inbox_stats_up gauge
outbox_inbox_stats_up{consumer="billing"} 1
# HELP outbox_oldest_pending_age_seconds Age of the oldest pending message (0 when none), at the last store query.
# TYPE outbox_oldest_pending_age_seconds gauge
outbox_oldest_pending_age_seconds 0
# HELP outbox_parked_messages Messages parked after a permanent failure or too many attempts, at the last store query.
# TYPE outbox_parked_messages gauge
outbox_parked_messages 1
# HELP outbox_pending_messages Messages waiting to be published (not parked), at the last store query.
# TYPE outbox_pending_messages gauge
outbox_pending_messages 0
# HELP outbox_relay_publish_failures_total Messages the relay failed to publish, per attempt, by topic, event type and whether the failure was permanent (the message is parked).
# TYPE outbox_relay_publish_failures_total counter
outbox_relay_publish_failures_total{event_type="orders.order_paid",permanent="true",topic="bad"} 1
# HELP outbox_relay_published_total Messages the relay published (acknowledged by the broker), by topic and event type.
# TYPE outbox_relay_published_total counter
outbox_relay_published_total{event_type="orders.order_paid",topic="orders"} 3
outbox_relay_published_total{event_type="orders.order_shipped",topic="orders"} 2
# HELP outbox_relay_store_errors_total Relay rounds in which the store failed to claim or to mark.
# TYPE outbox_relay_store_errors_total counter
outbox_relay_store_errors_total 0
# HELP outbox_retrying_messages Pending messages with a failed attempt counted (a broker outage counts none), at the last store query.
# TYPE outbox_retrying_messages gauge
outbox_retrying_messages 0
# HELP outbox_stats_up 1 when the last store query for the outbox gauges succeeded within the timeout, 0 otherwise.
# TYPE outbox_stats_up gauge
outbox_stats_up 1
`
	names := []string{
		"outbox_consumer_messages_total", "outbox_inbox_messages", "outbox_inbox_stats_up",
		"outbox_oldest_pending_age_seconds", "outbox_parked_messages", "outbox_pending_messages",
		"outbox_relay_publish_failures_total", "outbox_relay_published_total", "outbox_relay_store_errors_total",
		"outbox_retrying_messages", "outbox_stats_up",
	}
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// The histograms: one observation per batch, per published message,
	// per delivery.
	mfs := gather(t, reg)
	n := uint64(batches.Load())
	if h := sample(t, mfs, "outbox_relay_batch_size", "").GetHistogram(); h.GetSampleCount() != n || h.GetSampleSum() != 6 {
		t.Errorf("batch size: %d batches summing to %v, want %d batches of 6 messages in all", h.GetSampleCount(), h.GetSampleSum(), n)
	}
	for _, name := range []string{"outbox_relay_publish_duration_seconds", "outbox_relay_batch_duration_seconds"} {
		if h := sample(t, mfs, name, "").GetHistogram(); h.GetSampleCount() != n || h.GetSampleSum() <= 0 {
			t.Errorf("%s: %d observations summing to %v, want %d with a positive sum", name, h.GetSampleCount(), h.GetSampleSum(), n)
		}
	}
	if h := sample(t, mfs, "outbox_relay_lag_seconds", "").GetHistogram(); h.GetSampleCount() != 5 || h.GetSampleSum() <= 0 {
		t.Errorf("lag: %d observations summing to %v, want 5 (the published messages) with a positive sum", h.GetSampleCount(), h.GetSampleSum())
	}
	for outcome, want := range map[string]uint64{"applied": 3, "duplicate": 1, "ignored": 2} {
		if h := sample(t, mfs, "outbox_consumer_handle_duration_seconds", "consumer=billing,outcome="+outcome).GetHistogram(); h.GetSampleCount() != want {
			t.Errorf("handle duration %s: %d observations, want %d", outcome, h.GetSampleCount(), want)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestObserveBatch feeds a batch by hand: exact counts per label and the lag
// to PublishedAt, a negative lag counted as 0.
func TestObserveBatch(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msg := func(id int64, topic, typ string, age time.Duration) runtime.OutboxMessage {
		return runtime.OutboxMessage{ID: id, Topic: topic, CreatedAt: at.Add(-age), Envelope: runtime.Envelope{EventType: typ}}
	}
	m.ObserveBatch(relay.BatchResult{
		Claimed: 6, Published: 4, Failed: 2,
		Messages: []runtime.OutboxMessage{
			msg(1, "a", "t1", time.Second),
			msg(2, "a", "t1", 2*time.Second),
			msg(3, "b", "t2", time.Second), // fails, transient
			msg(4, "a", "t1", 3*time.Second),
			msg(5, "a", "t3", -time.Second), // the database's clock ahead: 0
			msg(6, "b", "t2", time.Second),  // fails for good
		},
		Failures:        []relay.Failure{{ID: 3, Err: errors.New("timeout")}, {ID: 6, Err: errors.New("too large"), Permanent: true}},
		Duration:        300 * time.Millisecond,
		PublishDuration: 200 * time.Millisecond,
		PublishedAt:     at,
	})
	m.ObserveBatch(relay.BatchResult{Err: errors.New("claim: connection refused")})

	const want = `
# HELP outbox_relay_publish_failures_total Messages the relay failed to publish, per attempt, by topic, event type and whether the failure was permanent (the message is parked).
# TYPE outbox_relay_publish_failures_total counter
outbox_relay_publish_failures_total{event_type="t2",permanent="false",topic="b"} 1
outbox_relay_publish_failures_total{event_type="t2",permanent="true",topic="b"} 1
# HELP outbox_relay_published_total Messages the relay published (acknowledged by the broker), by topic and event type.
# TYPE outbox_relay_published_total counter
outbox_relay_published_total{event_type="t1",topic="a"} 3
outbox_relay_published_total{event_type="t3",topic="a"} 1
# HELP outbox_relay_store_errors_total Relay rounds in which the store failed to claim or to mark.
# TYPE outbox_relay_store_errors_total counter
outbox_relay_store_errors_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_relay_publish_failures_total", "outbox_relay_published_total", "outbox_relay_store_errors_total"); err != nil {
		t.Error(err)
	}
	mfs := gather(t, reg)
	if h := sample(t, mfs, "outbox_relay_lag_seconds", "").GetHistogram(); h.GetSampleCount() != 4 || h.GetSampleSum() != 6 {
		t.Errorf("lag: %d observations summing to %v, want 4 summing to 6 (1+2+3+0)", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := sample(t, mfs, "outbox_relay_publish_duration_seconds", "").GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.2 {
		t.Errorf("publish duration: %d observations summing to %v, want one of 0.2", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := sample(t, mfs, "outbox_relay_batch_size", "").GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 6 {
		t.Errorf("batch size: %d observations summing to %v, want one of 6 (a failed claim is not a batch)", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestConsumerLabelsBounded: the event type of a malformed message or an
// unknown type never becomes a label value.
func TestConsumerLabelsBounded(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	observe := m.Consumer("billing")
	for i := range 3 {
		var res consumer.Result
		res.Outcome, res.Reason = consumer.OutcomeSkipped, consumer.ReasonUnknownType
		res.Meta.EventType = "garbage." + uuid.NewString()
		res.Duration = time.Duration(i) * time.Millisecond
		observe(res)
	}
	var res consumer.Result
	res.Outcome, res.Reason = consumer.OutcomeNacked, consumer.ReasonUnknownVersion
	res.Meta.EventType = "orders.order_paid"
	observe(res)
	const want = `
# HELP outbox_consumer_messages_total Deliveries handled by a consumer, by consumer, event type, outcome and reason.
# TYPE outbox_consumer_messages_total counter
outbox_consumer_messages_total{consumer="billing",event_type="",outcome="skipped",reason="unknown_type"} 3
outbox_consumer_messages_total{consumer="billing",event_type="orders.order_paid",outcome="nacked",reason="unknown_version"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_consumer_messages_total"); err != nil {
		t.Error(err)
	}
}

// countingStore counts Stats calls; block, when set, holds each call until
// closed, whatever its context says.
type countingStore struct {
	calls atomic.Int32
	block chan struct{}
	err   error
}

func (s *countingStore) Stats(ctx context.Context) (relay.Stats, error) {
	s.calls.Add(1)
	if s.block != nil {
		<-s.block
	}
	return relay.Stats{Pending: 7, Retrying: 2, Parked: 1, OldestPending: 90 * time.Second}, s.err
}

// TestStatsCache: scrapes within CacheFor reuse one store answer; past it,
// they query again.
func TestStatsCache(t *testing.T) {
	store := &countingStore{}
	m, err := metrics.New(metrics.Config{Store: store, CacheFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	for range 3 {
		mfs := gather(t, reg)
		if v := gaugeValue(t, mfs, "outbox_pending_messages", ""); v != 7 {
			t.Errorf("pending = %v, want 7", v)
		}
		if v := gaugeValue(t, mfs, "outbox_oldest_pending_age_seconds", ""); v != 90 {
			t.Errorf("oldest = %v, want 90", v)
		}
	}
	if n := store.calls.Load(); n != 1 {
		t.Errorf("Stats calls = %d after 3 scrapes within CacheFor, want 1", n)
	}

	store = &countingStore{}
	m, err = metrics.New(metrics.Config{Store: store, CacheFor: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	reg.MustRegister(m)
	for range 3 {
		gather(t, reg)
	}
	if n := store.calls.Load(); n != 3 {
		t.Errorf("Stats calls = %d after 3 scrapes past CacheFor, want 3", n)
	}
}

// TestSlowStore: a store that does not answer within Timeout (and ignores
// its context) leaves the gauges out and outbox_stats_up at 0; concurrent
// scrapes share the one call in flight; its late answer serves the next
// scrape.
func TestSlowStore(t *testing.T) {
	store := &countingStore{block: make(chan struct{})}
	m, err := metrics.New(metrics.Config{Store: store, Timeout: 20 * time.Millisecond, CacheFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			mfs, err := reg.Gather()
			if err != nil {
				t.Error(err)
				return
			}
			if has(mfs, "outbox_pending_messages") {
				t.Error("outbox_pending_messages reported without an answer from the store")
			}
			for _, mf := range mfs {
				if mf.GetName() == "outbox_stats_up" && mf.GetMetric()[0].GetGauge().GetValue() != 0 {
					t.Error("outbox_stats_up = 1, want 0")
				}
			}
		})
	}
	wg.Wait()
	if n := store.calls.Load(); n != 1 {
		t.Errorf("Stats calls = %d, want 1 (scrapes share the call in flight)", n)
	}
	close(store.block)
	until(t, "the late answer", func() bool {
		mfs := gather(t, reg)
		return has(mfs, "outbox_pending_messages") && gaugeValue(t, mfs, "outbox_stats_up", "") == 1
	})

	// A store that fails: outbox_stats_up 0, and the failure is cached too.
	failing := &countingStore{err: errors.New("database down")}
	m, err = metrics.New(metrics.Config{Store: failing, CacheFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	reg.MustRegister(m)
	for range 2 {
		mfs := gather(t, reg)
		if has(mfs, "outbox_pending_messages") || gaugeValue(t, mfs, "outbox_stats_up", "") != 0 {
			t.Error("a failing store: want no gauges and outbox_stats_up 0")
		}
	}
	if n := failing.calls.Load(); n != 1 {
		t.Errorf("Stats calls = %d, want 1 (the failure is cached for CacheFor)", n)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, cfg := range []metrics.Config{{CacheFor: -1}, {Timeout: -1}, {Inboxes: []metrics.Inbox{nil}}} {
		if _, err := metrics.New(cfg); !errors.Is(err, metrics.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// holder is a relay whose shard count the test sets.
type holder struct{ n atomic.Int64 }

func (h *holder) ShardsHeld() int { return int(h.n.Load()) }

// TestShardsHeld: with SetRelay, a scrape reports the relay's shards as
// outbox_relay_shards_held (0 standing by), and nothing while the relay
// says -1 (not running); a nil relay is refused. An operator could not
// tell which relay publishes (a new user's trial).
func TestShardsHeld(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if err := m.SetRelay(nil); !errors.Is(err, metrics.ErrInvalidConfig) {
		t.Errorf("SetRelay(nil) = %v, want ErrInvalidConfig", err)
	}
	var h holder
	h.n.Store(-1)
	if err := m.SetRelay(&h); err != nil {
		t.Fatal(err)
	}
	count := func() int { n, _ := testutil.GatherAndCount(reg, "outbox_relay_shards_held"); return n }
	if n := count(); n != 0 {
		t.Errorf("%d outbox_relay_shards_held samples while the relay is not running, want 0", n)
	}
	for _, want := range []int64{0, 64} {
		h.n.Store(want)
		exp := fmt.Sprintf("# HELP outbox_relay_shards_held Shards of the outbox this relay holds (0: standing by), at its last claim.\n# TYPE outbox_relay_shards_held gauge\noutbox_relay_shards_held %d\n", want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "outbox_relay_shards_held"); err != nil {
			t.Errorf("holding %d: %v", want, err)
		}
	}
}

// slotLagFake is a SlotLagSource whose answer the test sets.
type slotLagFake struct {
	mu    sync.Mutex
	bytes int64
	age   time.Duration
	err   error
}

func (f *slotLagFake) SlotLag(context.Context) (int64, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes, f.age, f.err
}

// TestSlotLag: the CDC slot's lag in bytes and seconds is scraped from
// Config.SlotLag, and a failing source reports outbox_cdc_slot_stats_up 0
// without the gauges.
func TestSlotLag(t *testing.T) {
	src := &slotLagFake{bytes: 4096, age: 1500 * time.Millisecond}
	m, err := metrics.New(metrics.Config{SlotLag: src, CacheFor: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	names := []string{"outbox_cdc_slot_lag_bytes", "outbox_cdc_slot_lag_seconds", "outbox_cdc_slot_stats_up"}
	want := `# HELP outbox_cdc_slot_lag_bytes WAL written since the CDC relay's replication slot's confirmed position: what the slot keeps, at the last query.
# TYPE outbox_cdc_slot_lag_bytes gauge
outbox_cdc_slot_lag_bytes 4096
# HELP outbox_cdc_slot_lag_seconds Age of the oldest event the CDC relay has read and not yet published (0 when none), at the last query.
# TYPE outbox_cdc_slot_lag_seconds gauge
outbox_cdc_slot_lag_seconds 1.5
# HELP outbox_cdc_slot_stats_up 1 when the last query for the slot gauges succeeded within the timeout, 0 otherwise.
# TYPE outbox_cdc_slot_stats_up gauge
outbox_cdc_slot_stats_up 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	src.mu.Lock()
	src.err = errors.New("database down")
	src.mu.Unlock() // CacheFor is 1ns: the next scrape queries again
	want = `# HELP outbox_cdc_slot_stats_up 1 when the last query for the slot gauges succeeded within the timeout, 0 otherwise.
# TYPE outbox_cdc_slot_stats_up gauge
outbox_cdc_slot_stats_up 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}
