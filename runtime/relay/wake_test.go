package relay_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// wakingStore is a Notifier and a WakeRequester over a store: it records
// every wake request and every claim, in order, and hands the relay's notify
// function to the test.
type wakingStore struct {
	relay.Store
	unsupported bool // Listen reports errors.ErrUnsupported

	mu       sync.Mutex
	wakeErr  error    // when set, RequestWake fails with it (logged as "request-failed")
	log      []string // "claim:<n messages>" and "request:<owner>"
	owners   map[string]bool
	notify   func()
	changed  chan struct{}
	listened chan struct{}
	once     sync.Once
}

func newWakingStore(s relay.Store) *wakingStore {
	return &wakingStore{Store: s, owners: map[string]bool{}, changed: make(chan struct{}, 1), listened: make(chan struct{})}
}

func (s *wakingStore) record(entry string) {
	s.mu.Lock()
	s.log = append(s.log, entry)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *wakingStore) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	b, err := s.Store.Claim(ctx, req)
	s.mu.Lock()
	s.owners[req.Owner] = true
	s.mu.Unlock()
	if err == nil {
		if len(b.Messages) > 0 {
			s.record("claim:found")
		} else {
			s.record("claim:empty")
		}
	}
	return b, err
}

func (s *wakingStore) RequestWake(ctx context.Context, owner string) error {
	s.mu.Lock()
	known, wakeErr := s.owners[owner], s.wakeErr
	s.mu.Unlock()
	if !known {
		return errors.New("wake requested for an owner that never claimed")
	}
	if wakeErr != nil {
		s.record("request-failed")
		return wakeErr
	}
	s.record("request")
	return nil
}

func (s *wakingStore) Listen(ctx context.Context, notify func()) error {
	if s.unsupported {
		return errors.ErrUnsupported
	}
	s.mu.Lock()
	s.notify = notify
	s.mu.Unlock()
	s.once.Do(func() { close(s.listened) })
	// No initial notify(), unlike a real store: a pending wake-up would
	// hide whether the relay claims again after a wake request on its
	// own.
	<-ctx.Done()
	return ctx.Err()
}

func (s *wakingStore) entries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// until waits until cond holds for the log.
func (s *wakingStore) until(t *testing.T, what string, cond func(log []string) bool) []string {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if log := s.entries(); cond(log) {
			return log
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; store log: %v", what, s.entries())
		}
	}
}

// runInBackground runs r until t ends, without waiting for Running.
func runInBackground(t *testing.T, r *relay.Relay) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
}

func count(log []string, entry string) int {
	n := 0
	for _, e := range log {
		if e == entry {
			n++
		}
	}
	return n
}

// TestIdleRelayRequestsWakeThenClaimsOnce: a relay with nothing to do asks
// the store to wake it, claims once more (a commit may have raced the
// request), and then waits: it does not ask again until a claim has found
// messages, after which, idle again, it asks again.
func TestIdleRelayRequestsWakeThenClaimsOnce(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	store := newWakingStore(mem)
	pub := &fakePublisher{}
	r, err := relay.New(store, pub, relay.Config{PollInterval: time.Hour, ActivePeriod: time.Millisecond, ActivePollInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, r) // not start(): wakingStore's Listen never signals Running
	<-store.listened
	log := store.until(t, "a wake request and the claim after it", func(log []string) bool {
		for i, e := range log {
			if e == "request" && i+1 < len(log) {
				return true
			}
		}
		return false
	})
	i := 0
	for log[i] != "request" {
		i++
	}
	if log[i+1] != "claim:empty" {
		t.Fatalf("after the wake request the relay did %q, want a claim; log: %v", log[i+1], log)
	}

	mem.Add(newMessage(1, "orders"))
	store.mu.Lock()
	notify := store.notify
	store.mu.Unlock()
	notify()
	log = store.until(t, "a second wake request after publishing", func(log []string) bool {
		return count(log, "claim:found") == 1 && count(log, "request") == 2
	})
	// Between the two requests there is a claim that found the message.
	first, second := -1, -1
	for j, e := range log {
		if e == "request" {
			if first < 0 {
				first = j
			} else {
				second = j
			}
		}
	}
	found := false
	for _, e := range log[first:second] {
		found = found || e == "claim:found"
	}
	if !found {
		t.Errorf("the relay asked to be woken twice without finding a message in between; log: %v", log)
	}
	if got := len(pub.Messages()); got != 1 {
		t.Errorf("published %d messages, want 1", got)
	}
}

// TestActiveRelayPollsWithoutWakeUps: within ActivePeriod of a claim that
// found messages, the relay claims every ActivePollInterval, so a message
// stored then is published with no wake-up at all (PollInterval is an
// hour, and nothing calls Notify).
func TestActiveRelayPollsWithoutWakeUps(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	mem.Add(newMessage(1, "orders"))
	rec := newBatchRecorder()
	pub := &fakePublisher{}
	r, err := relay.New(mem, pub, relay.Config{
		PollInterval: time.Hour, ActivePeriod: time.Hour, ActivePollInterval: time.Millisecond,
		OnBatch: rec.OnBatch, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	rec.untilCount(t, 1)
	mem.Add(newMessage(2, "orders"))
	rec.untilCount(t, 2)
	if !hasUUID(pub.Messages(), 2) {
		t.Errorf("message 2 was not published")
	}
}

// TestNoWakeRequestWhenStoreCannotNotify: a store whose Listen reports
// errors.ErrUnsupported is never asked to wake the relay (its writers
// send nothing); the relay polls.
func TestNoWakeRequestWhenStoreCannotNotify(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	store := newWakingStore(mem)
	store.unsupported = true
	rec := newBatchRecorder()
	r, err := relay.New(store, &fakePublisher{}, relay.Config{PollInterval: time.Millisecond, ActivePeriod: time.Millisecond, ActivePollInterval: time.Millisecond, OnBatch: rec.OnBatch, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r)
	<-r.Running() // Listen has reported ErrUnsupported
	base := len(store.entries())
	// Publish two messages, one after the other, each followed by idle
	// polls: the relay goes idle at least twice.
	for n := 1; n <= 2; n++ {
		mem.Add(newMessage(n, "orders"))
		store.until(t, "an empty claim after the message", func(log []string) bool {
			return count(log[base:], "claim:found") == n && log[len(log)-1] == "claim:empty"
		})
	}
	if n := count(store.entries()[base:], "request"); n != 0 {
		t.Errorf("the relay asked a store that cannot notify to wake it %d times", n)
	}
}

// TestStandbyListensOnlyOnceHandedWork: while the store's claims hand the
// relay nothing and say when to claim again (Batch.ClaimAgainIn: a relay
// that stands by, or has yet to take its share), Run does not listen: there
// is nothing to be woken for, and a listener holds a database connection.
// Running is closed after the first such claim. The first claim that says
// nothing of the kind starts the listener, whose notifications then wake
// the relay.
func TestStandbyListensOnlyOnceHandedWork(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	var standby atomic.Bool
	standby.Store(true)
	hinted := make(chan struct{}, 100)
	listening := make(chan func(), 1)
	store := &notifyingStore{
		Store: &testStore{Store: mem, claim: func(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
			if standby.Load() {
				select {
				case hinted <- struct{}{}:
				default:
				}
				return relay.Batch{ClaimAgainIn: time.Millisecond}, nil
			}
			return mem.Claim(ctx, req)
		}},
		listen: func(ctx context.Context, notify func()) error {
			notify() // as a Notifier does once it listens
			listening <- notify
			<-ctx.Done()
			return ctx.Err()
		},
	}
	pub := &fakePublisher{}
	r, err := relay.New(store, pub, relay.Config{PollInterval: never, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, context.Background(), r) // Running, with no listener
	for range 5 {
		receive(t, hinted)
	}
	select {
	case <-listening:
		t.Fatal("the relay listens while its claims hand it nothing")
	default:
	}
	standby.Store(false)
	notify := receive(t, listening)
	mem.Add(newMessage(1, "orders"))
	notify()
	deadline := time.Now().Add(waitTimeout)
	for len(pub.Messages()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the listener's notification did not wake the relay")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFailingWakeRequestsWarnOncePerStreak: a relay asks for a wake-up each
// time it goes idle, so a lasting failure (the wake-up register missing
// from a table migrated by hand, say) would log a warning at every poll.
// The first failure of a streak is a warning; the relay keeps polling, logs
// the rest of the streak at Debug, and Info when a request succeeds again;
// a new streak warns again.
func TestFailingWakeRequestsWarnOncePerStreak(t *testing.T) {
	mem := &runtimetest.MemoryStore{}
	store := newWakingStore(mem)
	store.wakeErr = errors.New(`relation "outbox_messages_wake" does not exist`)
	var logs runtimetest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	r, err := relay.New(store, &fakePublisher{}, relay.Config{
		PollInterval: time.Millisecond, ActivePeriod: time.Millisecond, ActivePollInterval: time.Millisecond, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	runInBackground(t, r) // not start(): wakingStore's Listen never signals Running
	warning := `level=WARN msg="relay: wake request failed, polling" error="relation \"outbox_messages_wake\" does not exist"`
	recovered := `level=INFO msg="relay: wake request succeeded again"`
	lines := func(line string) int { return strings.Count("\n"+logs.String(), "\n"+line+"\n") }
	store.until(t, "5 failed wake requests", func(log []string) bool { return count(log, "request-failed") >= 5 })
	if n := lines(warning); n != 1 {
		t.Fatalf("%d warnings after 5 failed wake requests, want 1; logs:\n%s", n, logs.String())
	}
	store.mu.Lock()
	store.wakeErr = nil
	store.mu.Unlock()
	store.until(t, "a wake request", func(log []string) bool { return count(log, "request") >= 1 })
	// Logged after RequestWake returned.
	for deadline := time.Now().Add(waitTimeout); lines(recovered) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q line after the request succeeded; logs:\n%s", recovered, logs.String())
		}
	}
	// It asks again once a claim has found messages, and fails again.
	store.mu.Lock()
	store.wakeErr = errors.New("connection reset")
	store.mu.Unlock()
	failed := count(store.entries(), "request-failed")
	mem.Add(newMessage(1, "orders"))
	store.until(t, "a new streak of failed wake requests", func(log []string) bool { return count(log, "request-failed") >= failed+3 })
	if n := lines(`level=WARN msg="relay: wake request failed, polling" error="connection reset"`); n != 1 {
		t.Fatalf("%d warnings for the second streak, want 1; logs:\n%s", n, logs.String())
	}
}
