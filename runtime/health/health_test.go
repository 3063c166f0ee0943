package health_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/health"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

const waitTimeout = 10 * time.Second

// nopPublisher accepts every message.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }

// failingStore fails every claim, as a store whose database is down.
type failingStore struct{ relay.Store }

func (failingStore) Claim(context.Context, relay.ClaimRequest) (relay.Batch, error) {
	return relay.Batch{}, errors.New("connection refused")
}

// offsetClock is the system clock moved forward by a settable offset.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time           { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) advance(d time.Duration)  { c.offset.Add(int64(d)) }
func (c *offsetClock) clock() runtime.ClockFunc { return c.Now }

// runRelay runs a relay on store until the test ends and returns it.
func runRelay(t *testing.T, store relay.Store) (r *relay.Relay, stop func()) {
	t.Helper()
	r, err := relay.New(store, nopPublisher{}, relay.Config{
		PollInterval: 5 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(waitTimeout):
				t.Error("relay did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// openDB opens a *sql.DB whose connections answer pings and nothing else:
// the database check needs only PingContext, and a real *sql.DB, so that a
// closed one fails the way an application's would.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db := sql.OpenDB(pingConnector{})
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// pingConnector makes pingConns.
type pingConnector struct{}

func (pingConnector) Connect(context.Context) (driver.Conn, error) { return pingConn{}, nil }
func (pingConnector) Driver() driver.Driver                        { return nil }

// pingConn answers pings; it runs no statement.
type pingConn struct{}

func (pingConn) Ping(context.Context) error { return nil }
func (pingConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("pingConn runs no statement")
}
func (pingConn) Close() error              { return nil }
func (pingConn) Begin() (driver.Tx, error) { return nil, errors.New("pingConn runs no transaction") }

func oldestPending(store *runtimetest.MemoryStore) func(context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		st, err := store.Stats(ctx)
		return st.OldestPending, err
	}
}

// get serves a GET request with h and returns the status code and decoded
// report.
func get(t *testing.T, h http.Handler) (int, health.Report) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var rep health.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("decoding the body: %v", err)
	}
	return resp.StatusCode, rep
}

// statuses returns each check's status by name, and its error.
func statuses(rep health.Report) map[string]string {
	m := make(map[string]string)
	for _, c := range rep.Checks {
		m[c.Name] = string(c.Status)
		if c.Error != "" {
			m[c.Name] += ": " + c.Error
		}
	}
	return m
}

// untilProgress waits for the relay's first progress.
func untilProgress(t *testing.T, r *relay.Relay) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for r.LastProgress().IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("the relay made no progress")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHealthy(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	store.Add(message1(time.Time{}))
	r, _ := runRelay(t, store)
	untilProgress(t, r)
	c, err := health.New(health.Config{Relay: r, DB: openDB(t), OldestPending: oldestPending(store)})
	if err != nil {
		t.Fatal(err)
	}
	code, rep := get(t, c.Readiness())
	if code != http.StatusOK || rep.Status != health.StatusOK || len(rep.Checks) != 3 {
		t.Errorf("readiness = %d %+v, want 200 with 3 checks ok", code, rep)
	}
	for i, name := range []string{health.CheckRelay, health.CheckDatabase, health.CheckBacklog} {
		if i < len(rep.Checks) && (rep.Checks[i].Name != name || rep.Checks[i].Status != health.StatusOK) {
			t.Errorf("check %d = %+v, want %s ok", i, rep.Checks[i], name)
		}
	}
	if rep.Checks[0].LimitSeconds != health.DefaultMaxStall.Seconds() || rep.Checks[2].LimitSeconds != health.DefaultMaxOldestPending.Seconds() {
		t.Errorf("limits = %v, %v, want the defaults", rep.Checks[0].LimitSeconds, rep.Checks[2].LimitSeconds)
	}
	code, rep = get(t, c.Liveness())
	if code != http.StatusOK || len(rep.Checks) != 1 || rep.Checks[0].Name != health.CheckRelay {
		t.Errorf("liveness = %d %+v, want 200 with the relay check only", code, rep)
	}
	// ServeHTTP is readiness.
	if code, rep = get(t, c); code != http.StatusOK || len(rep.Checks) != 3 {
		t.Errorf("ServeHTTP = %d %+v, want readiness", code, rep)
	}
}

func TestDatabaseDown(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	r, _ := runRelay(t, store)
	untilProgress(t, r)
	db := openDB(t)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := health.New(health.Config{Relay: r, DB: db, OldestPending: oldestPending(store)})
	if err != nil {
		t.Fatal(err)
	}
	code, rep := get(t, c.Readiness())
	got := statuses(rep)
	if code != http.StatusServiceUnavailable || rep.Status != health.StatusFail || got["relay"] != "ok" || got["backlog"] != "ok" ||
		!strings.HasPrefix(got["database"], "fail: ping: ") || !strings.Contains(got["database"], "closed") {
		t.Errorf("readiness = %d %v, want 503 with the database failing (closed)", code, got)
	}
	// A database outage is not the relay's to cure: liveness holds.
	if code, rep := get(t, c.Liveness()); code != http.StatusOK {
		t.Errorf("liveness = %d %+v, want 200", code, rep)
	}
}

// TestSlowDatabase: a ping that does not answer fails within Timeout,
// even if it ignores its context.
func TestSlowDatabase(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	c, err := health.New(health.Config{DB: pingFunc(func(context.Context) error { <-block; return nil }), Timeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	code, rep := get(t, c)
	if got := statuses(rep); code != http.StatusServiceUnavailable || !strings.Contains(got["database"], "context deadline exceeded") {
		t.Errorf("readiness = %d %v, want 503 with the ping timed out", code, got)
	}
}

type pingFunc func(context.Context) error

func (f pingFunc) PingContext(ctx context.Context) error { return f(ctx) }

// TestRelayStuck: a relay that stops making progress (its store fails every
// claim, or it stopped) fails both probes once MaxStall has passed.
func TestRelayStuck(t *testing.T) {
	t.Run("never progressed", func(t *testing.T) {
		r, _ := runRelay(t, failingStore{&runtimetest.MemoryStore{}})
		var clock offsetClock
		c, err := health.New(health.Config{Relay: r, MaxStall: time.Minute, Clock: clock.clock()})
		if err != nil {
			t.Fatal(err)
		}
		// Starting: no progress yet, but within MaxStall of New.
		if code, rep := get(t, c.Liveness()); code != http.StatusOK {
			t.Errorf("liveness at start = %d %+v, want 200", code, rep)
		}
		clock.advance(time.Minute + time.Second)
		code, rep := get(t, c.Liveness())
		if got := statuses(rep); code != http.StatusServiceUnavailable || !strings.Contains(got["relay"], "fail: no progress since the check started") {
			t.Errorf("liveness = %d %v, want 503 with the relay failing", code, got)
		}
		if r.LastProgress() != (time.Time{}) {
			t.Errorf("LastProgress = %v, want zero: every claim failed", r.LastProgress())
		}
	})
	t.Run("stopped", func(t *testing.T) {
		r, stop := runRelay(t, &runtimetest.MemoryStore{})
		untilProgress(t, r)
		var clock offsetClock
		c, err := health.New(health.Config{Relay: r, MaxStall: time.Minute, Clock: clock.clock()})
		if err != nil {
			t.Fatal(err)
		}
		if code, rep := get(t, c.Readiness()); code != http.StatusOK {
			t.Errorf("readiness while running = %d %+v, want 200", code, rep)
		}
		stop()
		clock.advance(time.Minute + time.Second)
		code, rep := get(t, c.Readiness())
		if got := statuses(rep); code != http.StatusServiceUnavailable || !strings.HasPrefix(got["relay"], "fail: no progress for 1m") {
			t.Errorf("readiness = %d %v, want 503 with the relay failing", code, got)
		}
		if rep.Checks[0].Seconds < 61 {
			t.Errorf("seconds = %v, want at least 61", rep.Checks[0].Seconds)
		}
	})
}

func TestBacklogTooOld(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	store.Add(message1(time.Now().Add(-10 * time.Minute))) // no relay: it stays pending
	c, err := health.New(health.Config{OldestPending: oldestPending(store), MaxOldestPending: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	code, rep := get(t, c.Readiness())
	if got := statuses(rep); code != http.StatusServiceUnavailable || !strings.HasPrefix(got["backlog"], "fail: oldest pending message is 10m") {
		t.Errorf("readiness = %d %v, want 503 with the backlog failing", code, got)
	}
	if s := rep.Checks[0].Seconds; s < 600 {
		t.Errorf("seconds = %v, want at least 600", s)
	}
	// Without a relay check, liveness has nothing to fail.
	if code, _ := get(t, c.Liveness()); code != http.StatusOK {
		t.Errorf("liveness = %d, want 200", code)
	}

	// A store that fails fails the backlog check.
	c, err = health.New(health.Config{OldestPending: func(context.Context) (time.Duration, error) { return 0, errors.New("no such table") }})
	if err != nil {
		t.Fatal(err)
	}
	if code, rep := get(t, c); code != http.StatusServiceUnavailable || statuses(rep)["backlog"] != "fail: oldest pending: no such table" {
		t.Errorf("readiness = %d %v, want 503 with the backlog failing", code, statuses(rep))
	}
}

func TestHead(t *testing.T) {
	c, err := health.New(health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/readyz", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD = %d with %d bytes, want 200 and no body", rec.Code, rec.Body.Len())
	}
}

func TestConfigValidate(t *testing.T) {
	// Typed nils are errors, not a panic at the first probe (found by a
	// new user's trial: the panic took the process down).
	var nilDB *sql.DB
	var nilRelay *relay.Relay
	for _, cfg := range []health.Config{{MaxStall: -1}, {MaxOldestPending: -1}, {Timeout: -1}, {DB: nilDB}, {Relay: nilRelay}} {
		if _, err := health.New(cfg); !errors.Is(err, health.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	_, err := health.New(health.Config{Timeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "Timeout") {
		t.Errorf("error %v does not name the field", err)
	}
}

func message1(created time.Time) runtime.OutboxMessage {
	return runtime.OutboxMessage{
		Topic:     "orders",
		CreatedAt: created,
		Envelope: runtime.Envelope{
			EventID: uuid.Must(uuid.NewV7()), EventType: "orders.order_placed", EventVersion: 1,
			AggregateType: "order", AggregateID: "1", OccurredAt: time.Now(), Payload: []byte(`{}`),
		},
	}
}

// brokerPing is a health.BrokerPinger whose answer the test sets.
type brokerPing struct{ err atomic.Pointer[error] }

func (b *brokerPing) Ping(context.Context) error {
	if p := b.err.Load(); p != nil {
		return *p
	}
	return nil
}

// TestBrokerUnreachable: readiness fails while the broker's ping fails,
// and passes once it answers; liveness ignores the broker.
func TestBrokerUnreachable(t *testing.T) {
	store := &runtimetest.MemoryStore{}
	r, _ := runRelay(t, store)
	untilProgress(t, r)
	b := &brokerPing{}
	down := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	b.err.Store(&down)
	c, err := health.New(health.Config{Relay: r, Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	code, rep := get(t, c.Readiness())
	if got := statuses(rep); code != http.StatusServiceUnavailable || got["relay"] != "ok" ||
		!strings.HasPrefix(got["broker"], "fail: broker ping: ") || !strings.Contains(got["broker"], "connection refused") {
		t.Errorf("readiness = %d %v, want 503 with the broker failing", code, got)
	}
	if code, rep := get(t, c.Liveness()); code != http.StatusOK {
		t.Errorf("liveness = %d %+v, want 200: a restart does not cure a broker outage", code, rep)
	}
	b.err.Store(nil)
	if code, rep := get(t, c.Readiness()); code != http.StatusOK || len(rep.Checks) != 2 || rep.Checks[1].Name != health.CheckBroker {
		t.Errorf("readiness = %d %+v, want 200 with the relay and broker checks", code, rep)
	}
}
