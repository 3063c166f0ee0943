package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// eventMaker builds the benchmark's events: Paid, its memo padded so that
// the JSON payload is about the requested size (the timestamp's length
// varies by a few bytes).
type eventMaker struct{ memo string }

func newEventMaker(payload int) (eventMaker, error) {
	base, err := newPaidPayload(0, "")
	if err != nil {
		return eventMaker{}, err
	}
	if payload < len(base) {
		return eventMaker{}, fmt.Errorf("-payload %d is below the smallest event, %d bytes", payload, len(base))
	}
	return eventMaker{memo: strings.Repeat("x", payload-len(base))}, nil
}

func newPaidPayload(i int, memo string) ([]byte, error) {
	env, err := runtime.NewEnvelope(context.Background(), runtime.NewEventID(), eventWith(i, memo), "account", "1")
	return env.Payload, err
}

func eventWith(i int, memo string) Paid {
	// A 7-digit amount and a 16-character reference keep the size constant.
	return NewPaid(runtime.SystemClock{}, int64(1_000_000+i%1_000_000), fmt.Sprintf("ref-%012d", i), memo)
}

// event returns the i-th event.
func (m eventMaker) event(i int) Paid { return eventWith(i, m.memo) }

// prefill empties the outbox and writes n events through the plugin's
// Enqueue, 1,000 per transaction, then VACUUM ANALYZE and CHECKPOINT, so the
// relay does not pay for hint bits, stale statistics or a pending checkpoint.
func prefill(ctx context.Context, db *gorm.DB, p *hooks.Plugin, ev eventMaker, n, aggregates int) error {
	if err := fill(ctx, db, p, ev, n, aggregates); err != nil {
		return err
	}
	return settle(db, sqlstore.DefaultTable)
}

// withPlugin migrates db's outbox and registers on it a GORM plugin that
// sends every event to topic.
func withPlugin(ctx context.Context, db *gorm.DB, topic string) (*hooks.Plugin, error) {
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return nil, err
	}
	plugin, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return topic }})
	if err != nil {
		return nil, err
	}
	if err := db.Use(plugin); err != nil {
		return nil, err
	}
	return plugin, nil
}

// fill empties the outbox and writes n events through the plugin's
// Enqueue, 1,000 per transaction, on any database.
func fill(ctx context.Context, db *gorm.DB, p *hooks.Plugin, ev eventMaker, n, aggregates int) error {
	if err := db.Exec(`TRUNCATE ` + sqlstore.DefaultTable).Error; err != nil {
		return err
	}
	for start := 0; start < n; start += 1000 {
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			for i := start; i < min(start+1000, n); i++ {
				if _, err := p.Enqueue(tx, "account", fmt.Sprint(i%aggregates), ev.event(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return nil
}

// settle runs VACUUM ANALYZE on table and a CHECKPOINT (superuser only;
// skipped otherwise).
func settle(db *gorm.DB, table string) error {
	if err := db.Exec(`VACUUM ANALYZE ` + table).Error; err != nil {
		return err
	}
	_ = db.Exec(`CHECKPOINT`).Error
	return nil
}

// quietLogger logs the relay's warnings and errors only, to stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// drainRelays runs one relay per store (with the publisher of the same
// index), all at once, until together they have published n messages, and
// returns how long that took.
func drainRelays(ctx context.Context, stores []relay.Store, pubs []message.Publisher, batch, n int) (time.Duration, error) {
	var published atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	relays := make([]*relay.Relay, len(stores))
	for i, s := range stores {
		r, err := relay.New(s, pubs[i], relay.Config{BatchSize: batch, Logger: quietLogger(), OnBatch: func(b relay.BatchResult) {
			if published.Add(int64(b.Published)) >= int64(n) {
				once.Do(func() { close(done) })
			}
		}})
		if err != nil {
			return 0, err
		}
		relays[i] = r
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(relays))
	start := time.Now()
	for _, r := range relays {
		go func() { errc <- r.Run(rctx) }()
	}
	var elapsed time.Duration
	var err error
	select {
	case <-done:
		elapsed = time.Since(start)
	case err = <-errc:
		err = fmt.Errorf("relay stopped before the drain ended: %w", err)
		errc <- nil
	case <-time.After(10 * time.Minute):
		err = fmt.Errorf("relay drain timed out: %d of %d published", published.Load(), n)
	}
	cancel()
	for range relays {
		if e := <-errc; e != nil && err == nil {
			err = e
		}
	}
	return elapsed, err
}

// timingPublisher adds up the time spent in Publish.
type timingPublisher struct {
	message.Publisher
	total atomic.Int64
}

// Publish publishes through the wrapped publisher and adds up its time.
func (t *timingPublisher) Publish(topic string, msgs ...*message.Message) error {
	start := time.Now()
	err := t.Publisher.Publish(topic, msgs...)
	t.total.Add(int64(time.Since(start)))
	return err
}

// countingPublisher counts the messages its publisher acknowledged and closes
// done once there are n.
type countingPublisher struct {
	message.Publisher
	n    int64
	got  atomic.Int64
	once sync.Once
	done chan struct{}
}

func newCountingPublisher(pub message.Publisher, n int) *countingPublisher {
	return &countingPublisher{Publisher: pub, n: int64(n), done: make(chan struct{})}
}

// Publish publishes through the wrapped publisher and counts the messages.
func (c *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := c.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	if c.got.Add(int64(len(msgs))) >= c.n {
		c.once.Do(func() { close(c.done) })
	}
	return nil
}

// Close does nothing: the wrapped publisher is the program's, shared.
func (c *countingPublisher) Close() error { return nil }

// ackRecorder records when the broker acknowledged each message, by UUID.
type ackRecorder struct {
	message.Publisher
	mu   sync.Mutex
	acks map[string]time.Time
}

func newAckRecorder(pub message.Publisher) *ackRecorder {
	return &ackRecorder{Publisher: pub, acks: map[string]time.Time{}}
}

// Publish publishes through the wrapped publisher and records the ack time of
// each message.
func (a *ackRecorder) Publish(topic string, msgs ...*message.Message) error {
	if err := a.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	for _, m := range msgs {
		if _, ok := a.acks[m.UUID]; !ok {
			a.acks[m.UUID] = now
		}
	}
	a.mu.Unlock()
	return nil
}

// Close does nothing: the wrapped publisher is the program's, shared.
func (a *ackRecorder) Close() error { return nil }

func (a *ackRecorder) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acks)
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	return nil
}

// history empties both outboxes (ours and the baselines') and gives each o.history
// published rows of -payload bytes, then VACUUM ANALYZE: an outbox in production
// keeps its published rows for retention, and autovacuum keeps the planner's
// statistics on it. Without them, a relay that starts on an empty, never
// analyzed table plans its statements for a table of a few pages: a prepared
// statement run five times on such a plan keeps it (PostgreSQL's plan
// cache: the generic plan wins when it costs no more than the custom ones),
// and the relay's mark went on scanning the whole table as it grew — up to
// 4 times slower per mark at 8,000 rows, a lottery decided by whether the
// relay's first marks came before or after the table's first pages.
func (b *bench) history(ctx context.Context) error {
	payload := `'{"memo":"` + strings.Repeat("x", max(b.o.payload-12, 0)) + `"}'`
	// rows inserts the history into table; shard is "" or the shard
	// column, which only our outbox has.
	rows := func(table, shard string) string {
		col, val := "", ""
		if shard != "" {
			col, val = shard+", ", fmt.Sprintf("(i %% %d)::smallint, ", sqlstore.Shards)
		}
		return `INSERT INTO ` + table + ` (event_id, event_type, event_version, aggregate_type, aggregate_id, ` + col + `topic, payload, occurred_at, published_at)
			SELECT gen_random_uuid(), 'bench.paid', 1, 'Account', (i % ` + fmt.Sprint(max(b.o.aggregates, 1)) + `)::text, ` + val +
			`'` + topic + `', ` + payload + `, now(), now()
			FROM generate_series(1, ` + fmt.Sprint(b.o.history) + `) AS i`
	}
	for _, q := range []string{
		`TRUNCATE ` + sqlstore.DefaultTable, `TRUNCATE bench_outbox`,
		rows(sqlstore.DefaultTable, "shard"), rows("bench_outbox", ""),
	} {
		if err := b.plain.WithContext(ctx).Exec(q).Error; err != nil {
			return fmt.Errorf("outbox history: %w", err)
		}
	}
	for _, t := range []string{sqlstore.DefaultTable, "bench_outbox"} {
		if err := settle(b.plain.WithContext(ctx), t); err != nil {
			return fmt.Errorf("outbox history: %w", err)
		}
	}
	return nil
}
