package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // runtimetest.PostgresDSN's driver

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgxv5"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		runChild()
	}
	dropLeftovers()
	runtimetest.Main(m)
}

// dropLeftovers drops the slots and publications a killed run of these
// tests left: an unused slot keeps the server's WAL forever.
func dropLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, runtimetest.PostgresBaseDSN())
	if err != nil {
		return // the tests say why
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE '`+slotPrefix+`%' AND NOT active`)
	rows, err := conn.Query(ctx, `SELECT pubname FROM pg_publication WHERE pubname LIKE '`+slotPrefix+`%'`)
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, n := range names {
		_, _ = conn.Exec(ctx, `DROP PUBLICATION IF EXISTS `+n)
	}
}

// slotPrefix names the slots and publications of these tests, so that a
// run that was killed leaves nothing another run cannot clean up.
const slotPrefix = "pgcdc_test_"

// env is one test's database: a schema of its own with the outbox table,
// a pool on it, and the Config of a slot and publication of its own,
// dropped when the test ends.
type env struct {
	dsn  string
	pool *pgxpool.Pool
	cfg  pgcdc.Config
}

// newEnv returns a test's env, skipping (failing in CI) when PostgreSQL is
// unreachable or its wal_level is not logical.
func newEnv(t testing.TB, mode pgcdc.Mode) *env {
	t.Helper()
	ctx := context.Background()
	dsn := runtimetest.PostgresDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var level string
	if err := pool.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		runtimetest.Unavailable(t, "PostgreSQL with wal_level = logical (ALTER SYSTEM SET wal_level = logical, then a restart; .ci/run does it)", "127.0.0.1:5432", "OUTBOX_TEST_POSTGRES_DSN", fmt.Errorf("wal_level is %q", level))
	}
	if err := sqlstore.Migrate(ctx, pgxv5.New(pool), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Fatal(err)
	}
	name := slotPrefix + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	e := &env{dsn: dsn, pool: pool, cfg: pgcdc.Config{
		// Logical decoding messages belong to the database, not a
		// schema: each test's prefix keeps the others' out of its slot.
		ConnString: dsn, Mode: mode, Slot: name, Publication: name, MessagePrefix: name,
		StatusInterval: time.Second, Logger: testLogger(t),
	}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pgcdc.DropWhenFree(ctx, e.cfg); err != nil {
			t.Errorf("drop slot: %v", err)
		}
	})
	return e
}

// testLogger logs to the test at Debug, so that a failure shows the
// store's and the relay's lines.
func testLogger(t testing.TB) *slog.Logger {
	if _, bench := t.(*testing.B); bench {
		return discard
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// discard drops every log line.
var discard = slog.New(slog.DiscardHandler)

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// open opens a store on e's slot, closed when the test ends.
func (e *env) open(t *testing.T) *pgcdc.Store {
	t.Helper()
	s, err := pgcdc.Open(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// event returns the envelope of the n-th event of aggregate agg.
func event(agg string, n int) runtime.Envelope {
	return runtime.Envelope{
		EventID:       runtime.NewEventID(),
		EventType:     "orders.order_placed",
		EventVersion:  1,
		AggregateType: "order",
		AggregateID:   agg,
		OccurredAt:    time.Now().UTC().Truncate(time.Microsecond),
		Headers:       map[string]string{runtime.MetadataCorrelationID: fmt.Sprintf("%s-%d", agg, n)},
		Payload:       fmt.Appendf(nil, `{"agg":%q,"n":%d}`, agg, n),
	}
}

// write writes envs in one transaction through the writer of e's mode, and
// commits it unless rollback.
func (e *env) write(t *testing.T, rollback bool, envs ...runtime.Envelope) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.writeTx(t, tx, envs...)
	if rollback {
		err = tx.Rollback(ctx)
	} else {
		err = tx.Commit(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// writeTx writes envs in tx through the writer of e's mode.
func (e *env) writeTx(t *testing.T, tx pgx.Tx, envs ...runtime.Envelope) {
	t.Helper()
	cfg := sqlstore.WriterConfig{}
	if e.cfg.Mode == pgcdc.Messages {
		cfg.LogicalMessages = e.cfg.WithDefaults().MessagePrefix
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]sqlstore.Row, len(envs))
	for i, env := range envs {
		rows[i] = sqlstore.Row{Envelope: env, Topic: "orders"}
	}
	if _, err := w.Write(context.Background(), pgxv5.Executor(tx), rows); err != nil {
		t.Fatal(err)
	}
}

// broker records what it accepted, in order, and fails the calls its fn
// refuses.
type broker struct {
	mu  sync.Mutex
	got []*message.Message
	fn  func(msgs []*message.Message) error
}

func (b *broker) Publish(_ string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fn != nil {
		if err := b.fn(msgs); err != nil {
			// The messages a per-message failure acknowledged are in.
			var each runtime.PublishErrors
			if errors.As(err, &each) {
				for i, m := range msgs {
					if each[i] == nil {
						b.got = append(b.got, m.Copy())
					}
				}
			}
			return err
		}
	}
	for _, m := range msgs {
		b.got = append(b.got, m.Copy())
	}
	return nil
}

func (b *broker) Close() error { return nil }

// ids returns the event ids the broker accepted, in order.
func (b *broker) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, len(b.got))
	for i, m := range b.got {
		out[i] = m.UUID
	}
	return out
}

// messages returns copies of what the broker accepted.
func (b *broker) messages() []*message.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*message.Message(nil), b.got...)
}

// runRelay runs a relay on store and pub until the test ends (or stop is
// called), and returns stop.
func runRelay(t *testing.T, store relay.Store, pub message.Publisher) (stop func()) {
	t.Helper()
	r, err := relay.New(store, pub, relay.Config{Logger: testLogger(t), MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
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
			case err := <-done:
				if err != nil {
					t.Errorf("relay: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("the relay did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// until polls cond every 10ms until it holds, failing the test after 30s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling until the deadline
	}
}

// slotLSN returns the slot's confirmed_flush_lsn.
func (e *env) slotLSN(t *testing.T) string {
	t.Helper()
	var lsn *string
	err := e.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot).Scan(&lsn)
	if err != nil {
		t.Fatal(err)
	}
	if lsn == nil {
		return ""
	}
	return *lsn
}

// publishedRows counts the outbox rows with published_at set.
func (e *env) publishedRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_messages WHERE published_at IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var errBroker = errors.New("broker down")

// forEachMode runs test as parallel subtests, one per mode.
func forEachMode(t *testing.T, test func(t *testing.T, mode pgcdc.Mode)) {
	for _, mode := range []pgcdc.Mode{pgcdc.Table, pgcdc.Messages} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			test(t, mode)
		})
	}
}
