package hooks_test

// End-to-end tests of the pipeline: GORM plugin → outbox table (hooks.Store)
// → relay → Kafka adapter (kafka-go) → in-process kfake (or the cluster named
// by OUTBOX_TEST_KAFKA_BROKERS).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// Account is the aggregate of the pipeline tests. Seq counts its committed
// deposits; each Deposited event carries the Seq it produced.
type Account struct {
	ID  int64 `gorm:"primaryKey"`
	Seq int
	runtime.Recorder
}

type Deposited struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Seq          int       `json:"seq"`
}

func (Deposited) EventKey() runtime.Key  { return runtime.Key{Type: "bank.deposited", Version: 1} }
func (e Deposited) EventTime() time.Time { return e.OccurredAt }
func (Deposited) Validate() error        { return nil }

func (a *Account) Deposit() {
	a.Seq++
	a.Record(Deposited{EventVersion: 1, OccurredAt: now(), Seq: a.Seq})
}

// pipeline is one test's database, plugin, store and Kafka topic.
type pipeline struct {
	db      *gorm.DB
	dsn     string // PostgreSQL only
	store   *sqlstore.Store
	brokers []string
	topic   string
	// incidents are the records its relays and publishers logged at WARN
	// or above (see incidentLog).
	incidents incidentLog
}

// incidentLog collects the records a pipeline's relays and Kafka
// publishers log at WARN or above: a lease lost or ended under a batch, a
// publish that failed or was abandoned, a mark that failed, a produce
// attempt that kafka-go retried. After any of them messages can reach the
// broker twice (at least once, as documented: a write abandoned, reported
// failed or timed out may have been written, a batch not marked is
// published again), and one can happen in a test that injects no fault: a
// 2-core machine busy with other suites under -race can leave a check of
// the session lock unanswered for 700 ms, or a statement waiting for
// seconds. The tests that check "exactly once" accept duplicates, and
// order that goes back to an event published before, only after such a
// record, and print the records when they fail.
type incidentLog struct {
	// injected, when set, is the text of the faults the test injects
	// itself: a record that carries it is no incident.
	injected string

	mu   sync.Mutex
	msgs []string
}

func (l *incidentLog) add(r slog.Record) {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	if l.injected != "" && strings.Contains(b.String(), l.injected) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, b.String())
}

// records returns the records so far.
func (l *incidentLog) records() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// incidentHandler passes a relay's logs on, adding its records at WARN or
// above to an incidentLog.
type incidentHandler struct {
	slog.Handler
	log   *incidentLog
	attrs []slog.Attr
}

func (h incidentHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		c := r.Clone()
		c.AddAttrs(h.attrs...)
		h.log.add(c)
	}
	return h.Handler.Handle(ctx, r)
}

func (h incidentHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return incidentHandler{h.Handler.WithAttrs(as), h.log, append(slices.Clip(h.attrs), as...)}
}

func (h incidentHandler) WithGroup(name string) slog.Handler {
	return incidentHandler{h.Handler.WithGroup(name), h.log, h.attrs}
}

// watching returns logger (nil: slog.Default()) logging through an
// incidentHandler of p's.
func (p *pipeline) watching(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		logger = slog.Default()
	}
	return slog.New(incidentHandler{Handler: logger.Handler(), log: &p.incidents})
}

// checkOnce fails t unless the published event ids got are the committed
// ones want, each once: duplicates are accepted (and logged) only after a
// relay or publisher of p logged an incident (see incidentLog).
func (p *pipeline) checkOnce(t *testing.T, want []string, got map[string]int) {
	t.Helper()
	incidents := p.incidents.records()
	if len(incidents) > 0 {
		dup := 0
		for id, n := range got {
			if n > 1 {
				dup += n - 1
				got[id] = 1
			}
		}
		t.Logf("%d incidents logged by the relays and publishers, %d duplicate records accepted; the first: %s", len(incidents), dup, incidents[0])
	}
	if diff := cmp.Diff(setOf(want), got); diff != "" {
		t.Fatalf("published event ids (-want +got); missing = lost, extra = ghost or duplicate (no relay or publisher logged a WARN):\n%s", diff)
	}
}

// checkOrder fails t unless each aggregate's records (recs, in offset
// order within each partition) are in one partition and go 1, 2, 3, ...
// A record may go back to an event published before (a batch published
// again) only after a relay or publisher of p logged an incident; it never
// skips one.
func (p *pipeline) checkOrder(t *testing.T, recs []record) {
	t.Helper()
	type pos struct {
		partition int32
		last, max int
	}
	rewinds := len(p.incidents.records()) > 0
	seen := map[string]*pos{}
	for _, r := range recs {
		ps, ok := seen[r.Key]
		if !ok {
			ps = &pos{partition: r.Partition}
			seen[r.Key] = ps
		}
		if ps.partition != r.Partition {
			t.Fatalf("aggregate %s in partitions %d and %d", r.Key, ps.partition, r.Partition)
		}
		switch {
		case r.Seq == ps.max+1: // the next event
		case rewinds && r.Seq >= 1 && r.Seq <= ps.max: // one published again
		default:
			t.Fatalf("aggregate %s: seq %d follows %d (highest %d) at partition %d offset %d", r.Key, r.Seq, ps.last, ps.max, r.Partition, r.Offset)
		}
		ps.last, ps.max = r.Seq, max(ps.max, r.Seq)
	}
}

func newPipeline(t *testing.T, dialect string, partitions int) *pipeline {
	t.Helper()
	return newPipelineOn(t, dialect, partitions, kafkatest.NewCluster(t))
}

// newPipelineOn is newPipeline on the given Kafka brokers.
func newPipelineOn(t *testing.T, dialect string, partitions int, brokers []string) *pipeline {
	t.Helper()
	p := &pipeline{brokers: brokers, topic: fmt.Sprintf("accounts-%d", rand.Int64())}
	if dialect == "postgres" {
		p.dsn = hookstest.PostgresDSN(t)
		db, err := gorm.Open(postgres.Open(p.dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if s, err := db.DB(); err == nil {
				s.Close()
			}
		})
		p.db = db
	} else {
		p.db = openDB(t, dialect, nil)
	}
	if err := hooks.Migrate(context.Background(), p.db, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.db.AutoMigrate(&Account{}); err != nil {
		t.Fatal(err)
	}
	plugin, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return p.topic }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.db.Use(plugin); err != nil {
		t.Fatal(err)
	}
	if p.store, err = sqlstore.NewStore(databasesql.New(sqlDBOf(t, p.db)), sqlstore.StoreConfig{}); err != nil {
		t.Fatal(err)
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: p.brokers, ConsumerGroup: "init", TopicPartitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(p.topic); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pipeline) publisher(t *testing.T) *kafka.Publisher {
	t.Helper()
	// Its WARNs (a produce attempt kafka-go retried) are incidents too.
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: p.brokers, Logger: p.watching(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

// deposit commits one deposit on each of n new accounts and returns their
// event ids.
func (p *pipeline) openAccounts(t *testing.T, n int) []string {
	t.Helper()
	accts := make([]Account, n)
	var ids []string
	for i := range accts {
		accts[i].Deposit()
		ids = append(ids, accts[i].OutboxRecorder().Pending()[0].ID.String())
	}
	if err := p.db.Create(&accts).Error; err != nil {
		t.Fatal(err)
	}
	return ids
}

func (p *pipeline) pending(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := p.db.Table("outbox_messages").Where(p.unpublished()).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// unpublished is the condition of the outbox rows pending or parked: on
// PostgreSQL the queue's mark does not write the row.
func (p *pipeline) unpublished() string {
	if p.db.Name() == "postgres" {
		return "published_at IS NULL AND (parked_at IS NOT NULL OR id IN (SELECT qid FROM " + sqlstore.QueueTable(sqlstore.DefaultTable) + "))"
	}
	return "published_at IS NULL"
}

// runRelay runs a relay until the test ends.
func (p *pipeline) runRelay(t *testing.T, pub message.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Logger = p.watching(cfg.Logger)
	r, err := relay.New(p.store, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	return r
}

// waitDrained polls until the outbox has no pending row.
func (p *pipeline) waitDrained(t *testing.T) {
	t.Helper()
	// Generous: this is "eventually", not a bound (liveness_test.go
	// bounds recoveries, its tests alone in the package). A CI run on a
	// loaded machine once took PostgreSQL over a minute to answer new
	// connections, and the relay published once it did.
	p.waitDrainedWithin(t, 3*time.Minute, "waiting for the relay")
}

type record struct {
	Partition int32
	Offset    int64
	Key       string
	EventID   string
	Type      string
	Seq       int
}

// readTopic reads every record of the topic, up to the partitions' high
// watermarks at the time of the call.
func readTopic(t *testing.T, brokers []string, topic string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := kafkago.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, pt := range parts {
		lc, err := kafkago.DialLeader(ctx, "tcp", brokers[0], topic, pt.ID)
		if err != nil {
			t.Fatal(err)
		}
		last, err := lc.ReadLastOffset()
		lc.Close()
		if err != nil {
			t.Fatal(err)
		}
		total += last
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []record
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: got %d of %d records: %v", topic, len(out), total, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			rec := record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
			for _, h := range r.Headers {
				switch h.Key {
				case runtime.MetadataEventID:
					rec.EventID = string(h.Value)
				case runtime.MetadataEventType:
					rec.Type = string(h.Value)
				}
			}
			var d Deposited
			if err := json.Unmarshal(r.Value, &d); err == nil {
				rec.Seq = d.Seq
			}
			out = append(out, rec)
		})
	}
	return out
}

func eventIDs(recs []record) map[string]int {
	m := map[string]int{}
	for _, r := range recs {
		m[r.EventID]++
	}
	return m
}

// distinctKeys is the set of recs' keys.
func distinctKeys(recs []record) map[string]bool {
	m := map[string]bool{}
	for _, r := range recs {
		m[r.Key] = true
	}
	return m
}

func setOf(ids []string) map[string]int {
	m := map[string]int{}
	for _, id := range ids {
		m[id]++
	}
	return m
}

func TestRelayPublishesEveryCommittedEventOnce(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, dialect, 4)
			want := p.openAccounts(t, 250)
			p.runRelay(t, p.publisher(t), relay.Config{BatchSize: 64, PollInterval: 10 * time.Millisecond})
			want = append(want, p.openAccounts(t, 250)...)
			p.waitDrained(t)
			recs := readTopic(t, p.brokers, p.topic)
			p.checkOnce(t, want, eventIDs(recs))
			for _, r := range recs {
				if r.Type != "bank.deposited" || r.Key == "" {
					t.Fatalf("record %+v lacks its type or key", r)
				}
			}
		})
	}
}

// flakyPublisher fails its first n Publish calls.
type flakyPublisher struct {
	message.Publisher
	failures atomic.Int32
}

func (f *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if f.failures.Add(-1) >= 0 {
		return errors.New("injected broker outage")
	}
	return f.Publisher.Publish(topic, msgs...)
}

func TestRelayRetriesFailedPublish(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, "postgres", 4)
	want := p.openAccounts(t, 100)
	fp := &flakyPublisher{Publisher: p.publisher(t)}
	fp.failures.Store(3)
	p.incidents.injected = "injected broker outage" // failed before writing: no duplicate
	var failed atomic.Int32
	p.runRelay(t, fp, relay.Config{BatchSize: 30, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		OnBatch: func(b relay.BatchResult) {
			if b.Failed > 0 {
				failed.Add(1)
			}
		}})
	p.waitDrained(t)
	if failed.Load() == 0 {
		t.Errorf("no batch failed")
	}
	p.checkOnce(t, want, eventIDs(readTopic(t, p.brokers, p.topic)))
	// A broker outage is nobody's fault: the failures are recorded, but no
	// attempt is counted, so nothing is ever parked for it.
	var failedRows, attempts int64
	p.db.Raw(`SELECT count(*) FROM outbox_messages WHERE last_error = 'injected broker outage'`).Scan(&failedRows)
	p.db.Raw(`SELECT count(*) FROM outbox_messages WHERE attempts > 0`).Scan(&attempts)
	if failedRows == 0 || attempts != 0 {
		t.Errorf("%d rows recorded the outage, %d rows counted an attempt; want some, and none", failedRows, attempts)
	}
}

// killingPublisher publishes, then kills its own process before the relay
// can mark the batch: the crash window between publish and mark.
type killingPublisher struct{ message.Publisher }

func (k killingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := k.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}

// TestRelayCrashChild is the relay process of TestRelayKilledBetweenPublishAndMark.
func TestRelayCrashChild(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("OUTBOX_TEST_CHILD_DSN")
	if dsn == "" {
		t.Skip("runs only as the child of TestRelayKilledBetweenPublishAndMark")
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, db)), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: []string{os.Getenv("OUTBOX_TEST_CHILD_BROKER")}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(store, killingPublisher{pub}, relay.Config{BatchSize: 40})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(context.Background())
	t.Fatal("the relay returned instead of being killed")
}

func TestRelayKilledBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, "postgres", 4)
	want := p.openAccounts(t, 100)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_CHILD_DSN="+p.dsn, "OUTBOX_TEST_CHILD_BROKER="+p.brokers[0])
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child relay = %v, want killed by SIGKILL; output:\n%s", err, out)
	}
	// The child published its first batch of 40 but marked nothing.
	if n := p.pending(t); n != 100 {
		t.Fatalf("pending after the crash = %d, want 100 (nothing marked)", n)
	}
	before := eventIDs(readTopic(t, p.brokers, p.topic))
	if len(before) != 40 {
		t.Fatalf("records on the broker after the crash = %d, want the first batch of 40", len(before))
	}
	// A restarted relay publishes everything; only the crashed batch repeats.
	p.runRelay(t, p.publisher(t), relay.Config{BatchSize: 40})
	p.waitDrained(t)
	got := eventIDs(readTopic(t, p.brokers, p.topic))
	for _, id := range want {
		switch n := got[id]; {
		case n == 0:
			t.Errorf("event %s lost", id)
		case before[id] == 1 && n != 2, before[id] == 0 && n != 1:
			t.Errorf("event %s published %d times (crashed batch: %v)", id, n, before[id] == 1)
		}
	}
	if len(got) != len(want) {
		t.Errorf("distinct events on the broker = %d, want %d", len(got), len(want))
	}
}

// recordingPublisher remembers which event ids it published.
type recordingPublisher struct {
	message.Publisher
	mu  sync.Mutex
	ids []string
}

func (r *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := r.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	r.mu.Lock()
	for _, m := range msgs {
		r.ids = append(r.ids, m.UUID)
	}
	r.mu.Unlock()
	return nil
}

// TestSeveralRelaysKeepAggregateOrder: 2 and 4 relays run on one outbox,
// with their defaults (one publishes, the others stand by) and all sharing
// it (StoreConfig.MaxActiveRelays 64), while 40 aggregates get 10 deposits
// each, one transaction per deposit; every event reaches the broker
// exactly once, and each aggregate's events arrive in commit order —
// checked as order, in the log (the regression of two relays publishing
// one aggregate's events 8 and 10 while a third held 9).
func TestSeveralRelaysKeepAggregateOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect string
		relays  int
		active  int // StoreConfig.MaxActiveRelays
	}{{"postgres", 2, 0}, {"postgres", 2, sqlstore.Shards}, {"postgres", 4, 0}, {"postgres", 4, sqlstore.Shards}, {"mysql", 4, sqlstore.Shards}} {
		relays := tc.relays
		t.Run(fmt.Sprint(tc.dialect, "/", relays, "/active-", tc.active), func(t *testing.T) {
			p := newPipeline(t, tc.dialect, 4)
			var err error
			if p.store, err = sqlstore.NewStore(databasesql.New(sqlDBOf(t, p.db)), sqlstore.StoreConfig{MaxActiveRelays: tc.active}); err != nil {
				t.Fatal(err)
			}
			pubs := make([]*recordingPublisher, relays)
			cfg := relay.Config{BatchSize: 25, PollInterval: 5 * time.Millisecond}
			for i := range pubs {
				pubs[i] = &recordingPublisher{Publisher: p.publisher(t)}
				p.runRelay(t, pubs[i], cfg)
			}
			accts := make([]Account, 40)
			if err := p.db.Session(&gorm.Session{SkipHooks: true}).Create(&accts).Error; err != nil {
				t.Fatal(err)
			}
			var want []string
			for range 10 {
				for i := range accts {
					accts[i].Deposit()
					want = append(want, accts[i].OutboxRecorder().Pending()[0].ID.String())
					if err := p.db.Save(&accts[i]).Error; err != nil {
						t.Fatal(err)
					}
				}
			}
			p.waitDrained(t)
			recs := readTopic(t, p.brokers, p.topic)
			p.checkOnce(t, want, eventIDs(recs))
			p.checkOrder(t, recs)
			var counts []int
			for _, pub := range pubs {
				pub.mu.Lock()
				counts = append(counts, len(pub.ids))
				pub.mu.Unlock()
			}
			t.Logf("events published per relay: %v", counts)
			publishing := 0
			for _, n := range counts {
				if n > 0 {
					publishing++
				}
			}
			if tc.active > 1 && publishing < 2 {
				t.Errorf("relays sharing the outbox: %d of them published (%v), want at least 2", publishing, counts)
			}
		})
	}
}

func TestNotifyWakesRelayBeforePollInterval(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, "postgres", 1)
	rp := &recordingPublisher{Publisher: p.publisher(t)}
	// With an hour-long poll interval, only NOTIFY can deliver within the
	// test's deadline.
	p.runRelay(t, rp, relay.Config{PollInterval: time.Hour})
	want := p.openAccounts(t, 3)
	p.waitDrained(t)
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if diff := cmp.Diff(setOf(want), setOf(rp.ids)); diff != "" {
		t.Fatalf("published (-want +got):\n%s", diff)
	}
}

// TestEndToEndOrderAndNoGhosts: 10,000 committed events over 100 aggregates
// with 10% of the transactions rolled back; the published set equals the
// committed set and each aggregate's partition holds its events in commit
// order.
func TestEndToEndOrderAndNoGhosts(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) { testEndToEndOrderAndNoGhosts(t, dialect) })
	}
}

func testEndToEndOrderAndNoGhosts(t *testing.T, dialect string) {
	events, aggregates := 2_000, 100
	if runtimetest.Long() {
		events = 10_000
	}
	p := newPipeline(t, dialect, 8)
	accts := make([]Account, aggregates)
	if err := p.db.Session(&gorm.Session{SkipHooks: true}).Create(&accts).Error; err != nil {
		t.Fatal(err)
	}
	p.runRelay(t, p.publisher(t), relay.Config{})

	var (
		mu        sync.Mutex
		committed = map[string]int{} // event id → seq
		rolled    atomic.Int32
		wg        sync.WaitGroup
		errs      = make(chan error, 8)
	)
	perWorker := events / 8
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for done := 0; done < perWorker; {
				// Worker w owns the aggregates with index ≡ w (mod 8).
				id := accts[w+8*rng.IntN((aggregates-w+7)/8)].ID
				rollback := rng.IntN(10) == 0
				var evID string
				var seq int
				err := p.db.Transaction(func(tx *gorm.DB) error {
					var a Account
					if err := tx.First(&a, id).Error; err != nil {
						return err
					}
					a.Deposit()
					evID, seq = a.OutboxRecorder().Pending()[0].ID.String(), a.Seq
					if err := tx.Save(&a).Error; err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				switch {
				case errors.Is(err, errRollback):
					rolled.Add(1)
				case err != nil:
					errs <- err
					return
				default:
					done++
					mu.Lock()
					committed[evID] = seq
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.waitDrained(t)
	recs := readTopic(t, p.brokers, p.topic)

	want := make([]string, 0, len(committed))
	for id := range committed {
		want = append(want, id)
	}
	p.checkOnce(t, want, eventIDs(recs))
	// Per aggregate: one partition, seqs 1..n in offset order.
	p.checkOrder(t, recs)
	t.Logf("committed %d events over %d aggregates, rolled back %d transactions", len(committed), len(distinctKeys(recs)), rolled.Load())
	if rolled.Load() == 0 {
		t.Error("no transaction was rolled back")
	}
}

var errRollback = errors.New("deliberate rollback")

// TestRelaySurvivesTerminatedConnections kills every database connection of
// the relay (its LISTEN connection and its claim connection) while it runs:
// it must reconnect, listen again, and publish what is committed afterwards
// without waiting for its (hour-long) poll interval.
func TestRelaySurvivesTerminatedConnections(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, "postgres", 2)
	appName := fmt.Sprintf("outbox_relay_%d", rand.Int64N(1<<40))
	u, err := url.Parse(p.dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", appName)
	u.RawQuery = q.Encode()
	relayDB, err := gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := relayDB.DB(); err == nil {
			s.Close()
		}
	})
	store, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, relayDB)), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p.store = store
	rp := &recordingPublisher{Publisher: p.publisher(t)}
	p.runRelay(t, rp, relay.Config{PollInterval: time.Hour, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})

	want := p.openAccounts(t, 5)
	p.waitDrained(t)
	for round := range 3 {
		var killed int64
		if err := p.db.Raw(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ?`, appName).Scan(&killed).Error; err != nil {
			t.Fatal(err)
		}
		if killed == 0 {
			t.Fatalf("round %d: no relay connection to terminate", round)
		}
		// Wait until the relay listens again (a new connection appears),
		// then commit more events: only NOTIFY can deliver them in time.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var listening int64
			p.db.Raw(`SELECT count(*) FROM pg_stat_activity WHERE application_name = ? AND query LIKE 'LISTEN%'`, appName).Scan(&listening)
			if listening > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the relay did not listen again within 30s", round)
			}
			time.Sleep(10 * time.Millisecond) // polling the database
		}
		want = append(want, p.openAccounts(t, 5)...)
		p.waitDrained(t)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	got := setOf(rp.ids)
	for _, id := range want {
		if got[id] == 0 {
			t.Errorf("event %s never published", id)
		}
	}
}

// Memo is an event whose text can exceed what the broker takes.
type Memo struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Text         string    `json:"text"`
}

func (Memo) EventKey() runtime.Key  { return runtime.Key{Type: "bank.memo", Version: 1} }
func (e Memo) EventTime() time.Time { return e.OccurredAt }
func (Memo) Validate() error        { return nil }

// TestOversizeMessageIsParkedOthersGoOn: a message larger than the broker
// takes fails permanently and is parked at once; every other aggregate's
// events are published, its own aggregate's later events wait behind it
// (order), and go out once an operator discards it.
func TestOversizeMessageIsParkedOthersGoOn(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, "postgres", 4)
	store, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, p.db)), sqlstore.StoreConfig{RetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.store = store
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: p.brokers, BatchBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })

	want := p.openAccounts(t, 20)
	poisoned := &Account{}
	poisoned.Record(Memo{EventVersion: 1, OccurredAt: now(), Text: strings.Repeat("x", 10_000)})
	poisonID := poisoned.OutboxRecorder().Pending()[0].ID.String()
	poisoned.Deposit()
	behind := poisoned.OutboxRecorder().Pending()[1].ID.String()
	if err := p.db.Create(poisoned).Error; err != nil {
		t.Fatal(err)
	}
	want = append(want, p.openAccounts(t, 20)...)

	p.runRelay(t, pub, relay.Config{PollInterval: 10 * time.Millisecond})
	deadline := time.Now().Add(60 * time.Second)
	for {
		var waiting int64
		p.db.Raw(`SELECT count(*) FROM outbox_messages WHERE parked_at IS NULL AND ` + p.unpublished()).Scan(&waiting)
		if waiting == 1 { // the event behind the parked one
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages neither published nor parked after 60s, want 1 (behind the parked one)", waiting)
		}
		time.Sleep(10 * time.Millisecond) // polling the database
	}
	var parked []struct {
		ID        int64
		EventID   string
		LastError string
		Attempts  int
	}
	p.db.Raw(`SELECT id, event_id, last_error, attempts FROM outbox_messages WHERE parked_at IS NOT NULL`).Scan(&parked)
	if len(parked) != 1 || parked[0].EventID != poisonID || !strings.Contains(parked[0].LastError, "Too Large") || parked[0].Attempts != 1 {
		t.Fatalf("parked = %+v, want only the memo %s, parked at its first (permanent) failure", parked, poisonID)
	}
	got := eventIDs(readTopic(t, p.brokers, p.topic))
	for _, id := range want {
		if got[id] == 0 {
			t.Errorf("event %s not published", id)
		}
	}
	if got[behind] != 0 {
		t.Errorf("event %s of the poisoned aggregate went out past the parked one", behind)
	}
	if n, err := store.Discard(context.Background(), parked[0].ID); err != nil || n != 1 {
		t.Fatalf("Discard = %d, %v", n, err)
	}
	p.waitDrained(t)
	got = eventIDs(readTopic(t, p.brokers, p.topic))
	if got[behind] == 0 {
		t.Errorf("event %s not published after the parked one was discarded", behind)
	}
	if got[poisonID] != 0 {
		t.Errorf("the oversize event reached the broker")
	}
}
