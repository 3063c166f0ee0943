package hooks_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
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

// TestRelaySurvivesHalfOpenDatabase: every connection of the relay to the
// database goes half-open (bytes vanish, nothing is closed — a dropped NAT
// entry), twice. The relay's deadline on each store call (StoreTimeout)
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
	if p.store, err = hooks.NewStore(relayDB, hooks.StoreConfig{LeaseTTL: 2 * time.Second}); err != nil {
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
	if held != hooks.Shards {
		t.Fatalf("the child holds %d shards, want %d", held, hooks.Shards)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	want = append(want, p.openAccounts(t, 20)...)
	p.store = mustStore(t, p.db, hooks.StoreConfig{LeaseTTL: ttl})
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

func mustStore(t *testing.T, db *gorm.DB, cfg hooks.StoreConfig) *hooks.Store {
	t.Helper()
	s, err := hooks.NewStore(db, cfg)
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
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: []string{os.Getenv("OUTBOX_TEST_CHILD_BROKER")}}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(mustStore(t, db, hooks.StoreConfig{LeaseTTL: ttl}), pub, relay.Config{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(context.Background())
}
