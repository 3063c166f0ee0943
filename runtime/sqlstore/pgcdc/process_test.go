package pgcdc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// The child relay process of TestRelayProcessesKilledAndPaused: it runs a
// relay on a pgcdc store and publishes into the table "received" of the
// same schema, the broker's log, until it is killed.
const (
	envChild   = "PGCDC_TEST_CHILD"   // the child's name
	envDSN     = "PGCDC_TEST_DSN"     // the schema's DSN
	envSlot    = "PGCDC_TEST_SLOT"    // the slot
	envTimeout = "PGCDC_TEST_TIMEOUT" // SenderTimeout, in ms
	envMode    = "PGCDC_TEST_MODE"    // the mode; its message prefix is the slot's name
)

// runChild is a child's main: it does not return.
func runChild() {
	name := os.Getenv(envChild)
	ms, _ := strconv.Atoi(os.Getenv(envTimeout))
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	pool, err := pgxpool.New(ctx, os.Getenv(envDSN))
	if err != nil {
		fail(err)
	}
	store, err := pgcdc.Open(ctx, pgcdc.Config{ConnString: os.Getenv(envDSN), Slot: os.Getenv(envSlot), Publication: os.Getenv(envSlot),
		Mode: pgcdc.Mode(os.Getenv(envMode)), MessagePrefix: os.Getenv(envSlot),
		SenderTimeout: time.Duration(ms) * time.Millisecond, RetryDelay: 20 * time.Millisecond})
	if err != nil {
		fail(err)
	}
	r, err := relay.New(store, logBroker{pool: pool, name: name}, relay.Config{MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		fail(err)
	}
	fail(fmt.Errorf("relay returned: %v", r.Run(ctx)))
}

// logBroker appends what it publishes to the table received, in order,
// and writes nothing once a message's deadline (its batch's lease) has
// passed, as the broker adapters' fencing does.
type logBroker struct {
	pool *pgxpool.Pool
	name string
}

func (b logBroker) Publish(_ string, msgs ...*message.Message) error {
	// A broker that takes its time: a relay spends most of its time in a
	// publish, so the pause lands in one.
	time.Sleep(20 * time.Millisecond)
	for _, m := range msgs {
		ctx := m.Context()
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return fmt.Errorf("lease over: %w", context.DeadlineExceeded)
		}
		_, err := b.pool.Exec(ctx, `INSERT INTO received (event_id, aggregate_id, relay) VALUES ($1, $2, $3)`,
			m.UUID, m.Metadata.Get(runtime.MetadataAggregateID), b.name)
		if err != nil {
			return err
		}
	}
	return nil
}

func (logBroker) Close() error { return nil }

// TestRelayProcessesKilledAndPaused runs the CDC relay as processes on one
// slot while events are written: one is killed (SIGKILL) and another takes
// over; that one is paused (SIGSTOP) and a third takes over once the
// server ends the paused stream (SenderTimeout); then the paused one is
// resumed. Every committed event reaches the broker's log, and on the
// log each aggregate's events follow one another, a successor's re-send of
// the unconfirmed tail aside: the paused relay's batch, when it wakes
// after its lease, never lands between or after them. It runs in both
// modes.
func TestRelayProcessesKilledAndPaused(t *testing.T) {
	t.Parallel()
	forEachMode(t, testRelayProcessesKilledAndPaused)
}

func testRelayProcessesKilledAndPaused(t *testing.T, mode pgcdc.Mode) {
	ctx := context.Background()
	e := newEnv(t, mode)
	if _, err := e.pool.Exec(ctx, `CREATE TABLE received (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, aggregate_id TEXT NOT NULL, relay TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := pgcdc.Setup(ctx, e.cfg); err != nil {
		t.Fatal(err)
	}
	const senderTimeout = 3 * time.Second
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+name, envDSN+"="+e.dsn, envSlot+"="+e.cfg.Slot,
			envTimeout+"="+strconv.FormatInt(senderTimeout.Milliseconds(), 10), envMode+"="+string(mode))
		cmd.Stderr = testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd
	}
	received := func() int {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM received`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	publishedBy := func(name string) bool {
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM received WHERE relay = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	const aggregates, rounds = 8, 60
	seq := map[string]int{} // event id → its place in its aggregate
	total := 0
	a := start("relay-a")
	var b, c *exec.Cmd
	for n := range rounds {
		for g := range aggregates {
			ev := event(fmt.Sprint("p", g), n)
			seq[ev.EventID.String()] = n
			e.write(t, false, ev)
			total++
		}
		switch n {
		case 5:
			b = start("relay-b") // stands by
		case 20:
			until(t, "relay-a publishing", func() bool { return publishedBy("relay-a") })
			if err := a.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		case 25:
			until(t, "relay-b publishing after the kill", func() bool { return publishedBy("relay-b") })
		case 35:
			c = start("relay-c") // stands by
			if err := b.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		case 50:
			// Past the server's timeout of b's silent stream: c streams.
			until(t, "relay-c publishing after the pause", func() bool { return publishedBy("relay-c") })
			if err := b.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond) // a stream of writes, not one burst
	}
	until(t, "every event on the broker", func() bool { return received() == total })
	_ = c

	rows, err := e.pool.Query(ctx, `SELECT event_id, aggregate_id, relay FROM received ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// Per aggregate, each event on the log is the next one, or a repeat
	// from an earlier one on (a successor re-sending the unconfirmed
	// tail): never a jump, which a stale write in between would make;
	// and the log ends with the aggregate's last event.
	prev := map[string]int{} // aggregate → the event last on the log
	byRelay := map[string]int{}
	logOf := map[string][]string{} // aggregate → its events on the log, for a failure's message
	for rows.Next() {
		var id, agg, rl string
		if err := rows.Scan(&id, &agg, &rl); err != nil {
			t.Fatal(err)
		}
		byRelay[rl]++
		n := seq[id]
		logOf[agg] = append(logOf[agg], fmt.Sprintf("%d(%s)", n, strings.TrimPrefix(rl, "relay-")))
		p, ok := prev[agg]
		if (!ok && n != 0) || (ok && n > p+1) {
			t.Errorf("aggregate %s: event %d landed (from %s) after event %d; its log: %v", agg, n, rl, p, logOf[agg])
		}
		prev[agg] = n
	}
	for agg, n := range prev {
		if n != rounds-1 {
			t.Errorf("aggregate %s: the log ends with event %d, not its last (%d): a stale write landed last", agg, n, rounds-1)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events; published by relay: %v", total, byRelay)
	if byRelay["relay-a"] == 0 || byRelay["relay-b"] == 0 || byRelay["relay-c"] == 0 {
		t.Errorf("published by relay %v: want each of the three to have published", byRelay)
	}
}
