package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// waitDrainedWithin polls until the outbox has no pending row, failing t if
// that takes longer than bound: the liveness bound under test.
func (p *pipeline) waitDrainedWithin(t *testing.T, bound time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for p.pending(t) > 0 {
		if time.Since(start) > bound {
			t.Fatalf("%s: outbox still has %d pending rows after %v", what, p.pending(t), bound)
		}
		time.Sleep(20 * time.Millisecond) // polling a database
	}
	return time.Since(start)
}

// The tests of this file bound how soon the pipeline recovers from a fault,
// so they run alone in the package: not beside its parallel tests (see
// TestMain), whose load on a 2-core machine under -race would stretch
// the recovery past its bound.

// TestRelaySurvivesHalfOpenDatabase: every connection of the relay to the
// database goes half-open (bytes vanish, nothing is closed — a dropped NAT
// entry), twice, then the network stalls for a while and comes back. The relay's deadline on each store call (StoreTimeout)
// fails the calls on the dead connections, the driver discards them, and
// the relay publishes what was committed since on new connections, within
// a few StoreTimeouts — not after the kernel's ~15 minutes.
func TestRelaySurvivesHalfOpenDatabase(t *testing.T) {
	p := newPipeline(t, "postgres", 2)
	u, err := url.Parse(p.dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := runtimetest.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	relayDB, err := gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := relayDB.DB(); err == nil {
			s.Close()
		}
	})
	if p.store, err = sqlstore.NewStore(databasesql.New(sqlDBOf(t, relayDB)), sqlstore.StoreConfig{LeaseTTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	const storeTimeout = time.Second
	p.runRelay(t, p.publisher(t), relay.Config{PollInterval: 50 * time.Millisecond, StoreTimeout: storeTimeout,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	p.openAccounts(t, 5)
	p.waitDrainedWithin(t, 30*time.Second, "before any fault")
	for round := range 2 {
		if n := proxy.Blackhole(); n == 0 {
			t.Fatalf("round %d: the relay has no connection to cut", round)
		}
		p.openAccounts(t, 5) // committed by the application, not through the proxy
		// Bound: the pool's idle connections each cost one StoreTimeout
		// before the relay reaches a new one, plus backoff and a poll.
		took := p.waitDrainedWithin(t, 20*storeTimeout, "after half-open connections")
		t.Logf("round %d: published %v after every relay connection went half-open", round, took.Round(time.Millisecond))
	}
	// A network that stalls for three StoreTimeouts, then comes back: the
	// calls in flight time out, and the relay goes on once it is back.
	proxy.Pause()
	p.openAccounts(t, 5)
	stalled := time.Now()
	for time.Since(stalled) < 3*storeTimeout {
		if p.pending(t) == 0 {
			t.Fatal("events published while the relay's network was paused")
		}
		time.Sleep(50 * time.Millisecond) // the pause lasts a set time
	}
	proxy.Resume()
	took := p.waitDrainedWithin(t, 20*storeTimeout, "after a paused network resumed")
	t.Logf("published %v after a %v network stall ended", took.Round(time.Millisecond), 3*storeTimeout)
}

// TestRelayPausedIsTakenOver: a relay process holding every shard is
// SIGSTOPped; another relay takes its shards over once its lease (LeaseTTL)
// expires and publishes what was committed meanwhile. When the paused
// relay resumes it finds it lost its shards and publishes nothing twice
// out of order.
func TestRelayPausedIsTakenOver(t *testing.T) {
	p := newPipeline(t, "postgres", 4)
	const ttl = 2 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayPausedChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_CHILD_DSN="+p.dsn, "OUTBOX_TEST_CHILD_BROKER="+p.brokers[0], "OUTBOX_TEST_CHILD_TTL="+ttl.String())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Wait until the child holds every shard and has published a batch.
	want := p.openAccounts(t, 20)
	p.waitDrainedWithin(t, 30*time.Second, "the child relay")
	var held int64
	p.db.Raw(`SELECT count(*) FROM outbox_messages_leases WHERE owner IS NOT NULL`).Scan(&held)
	if held != sqlstore.Shards {
		t.Fatalf("the child holds %d shards, want %d", held, sqlstore.Shards)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	want = append(want, p.openAccounts(t, 20)...)
	p.store = mustStore(t, p.db, sqlstore.StoreConfig{LeaseTTL: ttl})
	p.runRelay(t, p.publisher(t), relay.Config{PollInterval: 20 * time.Millisecond})
	// Bound: the child's lease (ttl) plus a renewal interval and a poll.
	p.waitDrainedWithin(t, 3*ttl, "after the relay holding every shard was paused")
	t.Logf("taken over and published %v after the pause (LeaseTTL %v)", time.Since(paused).Round(time.Millisecond), ttl)

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	want = append(want, p.openAccounts(t, 20)...)
	p.waitDrainedWithin(t, 3*ttl, "after the paused relay resumed")
	got := eventIDs(readTopic(t, p.brokers, p.topic))
	for _, id := range want {
		if got[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d distinct events on the broker, want %d", len(got), len(want))
	}
}

func mustStore(t *testing.T, db *gorm.DB, cfg sqlstore.StoreConfig) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, db)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRelayPausedChild is the relay process of TestRelayPausedIsTakenOver.
func TestRelayPausedChild(t *testing.T) {
	dsn := os.Getenv("OUTBOX_TEST_CHILD_DSN")
	if dsn == "" {
		t.Skip("runs only as the child of TestRelayPausedIsTakenOver")
	}
	ttl, err := time.ParseDuration(os.Getenv("OUTBOX_TEST_CHILD_TTL"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: []string{os.Getenv("OUTBOX_TEST_CHILD_BROKER")}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: ttl}), pub, relay.Config{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(context.Background())
}

// TestPartitionOutageHoldsOnlyItsAggregates: one partition of the topic
// refuses every write (NOT_LEADER_FOR_PARTITION) for a while. The events of
// the aggregates routed to the other partitions are published and marked
// meanwhile; the sick partition's wait, in order, and go out within seconds
// of its recovery. Nothing is lost, nothing published twice out of order.
func TestPartitionOutageHoldsOnlyItsAggregates(t *testing.T) {
	// Three brokers, three partitions: each produce request holds one
	// partition (its leader's), so the control function can refuse one.
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 3, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	p := newPipelineOn(t, "postgres", 3, cluster.Addrs())
	var sick atomic.Bool
	fake := cluster.Fake()
	fake.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		refuse := false
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				refuse = refuse || sick.Load() && rt.Topic == p.topic && rp.Partition == 0
			}
		}
		if !refuse {
			return nil, nil, false
		}
		return kafkatest.RefuseProduce(req, kerr.NotLeaderForPartition.Code), nil, true
	})
	p.runRelay(t, p.publisher(t), relay.Config{PollInterval: 20 * time.Millisecond})

	accts := make([]Account, 30)
	if err := p.db.Session(&gorm.Session{SkipHooks: true}).Create(&accts).Error; err != nil {
		t.Fatal(err)
	}
	onSick := 0
	for _, a := range accts {
		if (&kafkago.Hash{}).Balance(kafkago.Message{Key: []byte(fmt.Sprint(a.ID))}, 0, 1, 2) == 0 {
			onSick++
		}
	}
	if onSick == 0 || onSick == len(accts) {
		t.Fatalf("%d of %d aggregates on partition 0: the test needs some on each side", onSick, len(accts))
	}
	sick.Store(true)
	var want []string
	for range 2 {
		for i := range accts {
			accts[i].Deposit()
			want = append(want, accts[i].OutboxRecorder().Pending()[0].ID.String())
			if err := p.db.Save(&accts[i]).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	// The healthy partitions' events go out while partition 0 is down.
	start := time.Now()
	for p.pending(t) != int64(2*onSick) {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("with partition 0 down: %d pending, want only its %d events", p.pending(t), 2*onSick)
		}
		time.Sleep(20 * time.Millisecond) // polling a database
	}
	t.Logf("healthy partitions published in %v while partition 0 was down", time.Since(start).Round(time.Millisecond))
	var refused int64
	p.db.Raw(`SELECT count(*) FROM outbox_messages WHERE last_error LIKE '%Not Leader%'`).Scan(&refused)
	if refused == 0 {
		t.Error("no row recorded the partition's error")
	}
	sick.Store(false)
	took := p.waitDrainedWithin(t, 15*time.Second, "after partition 0 recovered")
	t.Logf("partition 0's events published %v after it recovered", took.Round(time.Millisecond))

	recs := readTopic(t, p.brokers, p.topic)
	got := eventIDs(recs)
	for _, id := range want {
		if got[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
	next := map[string]int{}
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		if r.Seq != next[r.Key]+1 {
			t.Errorf("aggregate %s: first delivery of seq %d after %d", r.Key, r.Seq, next[r.Key])
		}
		next[r.Key] = r.Seq
	}
}

// TestBrokerOutageRecoversInSeconds: the broker refuses everything for a
// while; no message's retry delay grows meanwhile (nothing could be
// published: it is nobody's fault), so once the broker is back the backlog
// goes out within the relay's MaxBackoff and a RetryDelay, not after
// minutes.
func TestBrokerOutageRecoversInSeconds(t *testing.T) {
	p := newPipeline(t, "postgres", 2)
	var down atomic.Bool
	down.Store(true)
	pub := &switchPublisher{Publisher: p.publisher(t), down: &down}
	p.runRelay(t, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	want := p.openAccounts(t, 20)
	// Let the relay fail for a while, then count what it recorded.
	deadline := time.Now().Add(10 * time.Second)
	for pub.failures.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not try to publish")
		}
		time.Sleep(20 * time.Millisecond) // polling a counter
	}
	var attempts int64
	p.db.Raw(`SELECT coalesce(max(attempts), 0) FROM outbox_messages`).Scan(&attempts)
	if attempts != 0 {
		t.Errorf("after %d failed publishes of a broker down for everyone, a message counts %d attempts; want 0", pub.failures.Load(), attempts)
	}
	down.Store(false)
	// Bound: the relay's MaxBackoff (5s) plus the RetryDelay (1s).
	took := p.waitDrainedWithin(t, 10*time.Second, "after the broker came back")
	t.Logf("backlog published %v after the broker came back", took.Round(time.Millisecond))
	got := eventIDs(readTopic(t, p.brokers, p.topic))
	for _, id := range want {
		if got[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
}

// switchPublisher fails every Publish while down is set.
type switchPublisher struct {
	message.Publisher
	down     *atomic.Bool
	failures atomic.Int32
}

func (s *switchPublisher) Publish(topic string, msgs ...*message.Message) error {
	if s.down.Load() {
		s.failures.Add(1)
		return errors.New("broker unreachable")
	}
	return s.Publisher.Publish(topic, msgs...)
}
