// Command relaybench measures the relay against PostgreSQL and an in-process
// Kafka-protocol broker (kfake), and compares it in the same process with the
// naive relay of the classic outbox article: claim rows, publish and mark
// them one at a time.
//
//	go run ./examples/relaybench                       # local PostgreSQL, database test
//	go run ./examples/relaybench -events 100000 -rate 1000 -duration 10s
//
// With -broker-urls it drains the same pre-filled outbox through each broker
// adapter named by URL (package adapters/broker), -reps times interleaved,
// and prints events/s per broker:
//
//	go run ./examples/relaybench -events 20000 -broker-urls kafka://kfake,amqp://guest:guest@127.0.0.1:5672/,memory://
//
// It prints events/s draining a pre-filled outbox for both relays and their
// ratio, then the commit → broker-ack latency (p50, p99) of the relay at a
// steady offered rate with default settings (LISTEN/NOTIFY wake-ups).
//
// With -big-events it measures instead the memory of a backlog of large
// events: it pre-fills that many events of -big-bytes (default 900,000)
// bytes each, drains them with the relay's defaults (or -max-batch-bytes) to
// a kfake broker that accepts 1 MB messages and acknowledges without storing
// them (kfake keeps records in memory), and prints events/s and the peak
// resident set size (VmRSS) of the process during the drain. -rss-limit
// (default 8 GiB) stops the run when the process grows past it:
//
//	go run ./examples/relaybench -big-events 2000                                # MaxBatchBytes 8 MiB
//	go run ./examples/relaybench -big-events 2000 -max-batch-bytes 1000000000000  # 1,000 rows a claim
//
// It creates and drops its own schema; nothing else in the database is
// touched.
package main

//go:generate go tool outboxgen events.yaml

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		os.Exit(1)
	}
}

type options struct {
	dsn        string
	events     int
	naive      int
	rate       int
	duration   time.Duration
	batch      int
	aggregates int
	producers  int
	verbose    bool
	cpuprofile string
	skipDrain  bool

	bigEvents     int
	bigBytes      int
	maxBatchBytes int64
	rssLimit      int64

	brokerURLs string
	reps       int
}

// Account is the benchmark's aggregate.
type Account struct {
	ID      int64 `gorm:"primaryKey"`
	Balance int64
	runtime.Recorder
}

// newEvent returns the i-th benchmark event (about 200 bytes of JSON).
func newEvent(i int) Deposited {
	return NewDeposited(runtime.SystemClock{}, int64(i), fmt.Sprintf("ref-%012d", i), strings.Repeat("x", 80))
}

const topic = "bench.account"

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("relaybench", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.dsn, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	fs.IntVar(&o.events, "events", 100_000, "rows pre-filled for the throughput runs")
	fs.IntVar(&o.naive, "naive-events", 0, "rows for the naive relay's run (default: -events)")
	fs.IntVar(&o.rate, "rate", 1000, "offered events/s for the latency run")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the latency run")
	fs.IntVar(&o.batch, "batch", 0, "relay BatchSize (default: the relay's default)")
	fs.IntVar(&o.aggregates, "aggregates", 1000, "distinct aggregates")
	fs.IntVar(&o.producers, "producers", 8, "goroutines committing events in the latency run")
	fs.BoolVar(&o.skipDrain, "latency-only", false, "skip the throughput runs")
	fs.BoolVar(&o.verbose, "v", false, "print batch and publish timings to stderr")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the relay's drain run to this file")
	fs.IntVar(&o.bigEvents, "big-events", 0, "large-event mode: drain this many events of -big-bytes and report peak RSS (skips the other runs)")
	fs.IntVar(&o.bigBytes, "big-bytes", 900_000, "payload size of each large event")
	fs.Int64Var(&o.maxBatchBytes, "max-batch-bytes", 0, "relay MaxBatchBytes in the large-event mode (default: the relay's default, 8 MiB)")
	fs.Int64Var(&o.rssLimit, "rss-limit", 8<<30, "large-event mode: exit with status 3 when the RSS exceeds this many bytes (0: no limit)")
	fs.StringVar(&o.brokerURLs, "broker-urls", "", "broker mode: comma-separated broker URLs (adapters/broker; kafka://kfake starts one in-process) to drain the same pre-filled outbox through, and nothing else")
	fs.IntVar(&o.reps, "reps", 3, "broker mode: repetitions per broker")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h printed the usage: not a failure
			return nil
		}
		return err
	}
	if o.naive == 0 {
		o.naive = o.events
	}
	if o.bigEvents > 0 {
		return bigRun(ctx, o, out)
	}

	db, cleanup, err := openSchema(o.dsn)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Account{}); err != nil {
		return err
	}
	plugin, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return topic }})
	if err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}
	storeDB, err := db.DB()
	if err != nil {
		return err
	}
	store, err := sqlstore.NewStore(storeDB, sqlstore.StoreConfig{})
	if err != nil {
		return err
	}
	if o.brokerURLs != "" {
		return brokerRun(ctx, db, plugin, store, o, out)
	}

	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 8})
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.Addrs()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, AllowAutoTopicCreation: true}, nil)
	if err != nil {
		return err
	}
	defer pub.Close()
	// Create the topic and warm the writer up.
	warm := message.NewMessage("warm-up", []byte("{}"))
	warm.Metadata.Set(runtime.MetadataAggregateID, "warm")
	if err := pub.Publish(topic, warm); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	// The producers run 8 transactions at a time: keep their connections
	// (database/sql keeps only 2 idle ones by default, and a new
	// PostgreSQL connection costs a process fork).
	sqlDB.SetMaxIdleConns(16)

	fmt.Fprintf(out, "relaybench: PostgreSQL %s, kfake 1 broker, topic %s with 8 partitions, %d aggregates\n",
		redact(o.dsn), topic, o.aggregates)

	if !o.skipDrain {
		if err := drains(ctx, db, plugin, store, pub, sqlDB, brokers, o, out); err != nil {
			return err
		}
	}

	// 3. Latency at a steady rate.
	p50, p99, n, err := latency(ctx, db, store, pub, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "latency commit → broker ack at %d events/s for %s (%d events, defaults, NOTIFY): p50 %.2f ms, p99 %.2f ms\n",
		o.rate, o.duration, n, ms(p50), ms(p99))
	return nil
}

// drains measures the throughput of the relay and of the naive relay, each
// draining a pre-filled outbox.
func drains(ctx context.Context, db *gorm.DB, plugin *hooks.Plugin, store *sqlstore.Store, pub message.Publisher, sqlDB *sql.DB, brokers []string, o options, out io.Writer) error {
	// 1. Throughput of the relay with its defaults.
	if err := prefill(ctx, db, plugin, o.events, o.aggregates); err != nil {
		return err
	}
	if path := o.cpuprofile; path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer f.Close()
	}
	ours, err := drainRelay(ctx, store, pub, o)
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "drain %7d rows  gooutbox relay (BatchSize %d)  %9.0f events/s\n", o.events, effectiveBatch(o.batch), ours)

	// 2. Throughput of the naive relay.
	if err := prefill(ctx, db, plugin, o.naive, o.aggregates); err != nil {
		return err
	}
	naive, err := drainNaive(ctx, sqlDB, brokers)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "drain %7d rows  naive relay (one row at a time)  %9.0f events/s\n", o.naive, float64(o.naive)/naive.Seconds())
	fmt.Fprintf(out, "ratio gooutbox / naive: %.1fx\n", ours/(float64(o.naive)/naive.Seconds()))
	return nil
}

func effectiveBatch(b int) int {
	if b == 0 {
		return relay.DefaultBatchSize
	}
	return b
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// prefill writes n events in transactions of 1,000 through the plugin's
// Enqueue, then VACUUM ANALYZE so the relay does not pay for hint bits.
func prefill(ctx context.Context, db *gorm.DB, p *hooks.Plugin, n, aggregates int) error {
	if err := db.Exec(`TRUNCATE outbox_messages`).Error; err != nil {
		return err
	}
	for start := 0; start < n; start += 1000 {
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			for i := start; i < min(start+1000, n); i++ {
				if _, err := p.Enqueue(tx, "account", fmt.Sprint(i%aggregates), newEvent(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return db.Exec(`VACUUM ANALYZE outbox_messages`).Error
}

func drainRelay(ctx context.Context, store *sqlstore.Store, pub message.Publisher, o options) (float64, error) {
	var published atomic.Int64
	done := make(chan struct{})
	var claimDur atomic.Int64
	tp := &timingPublisher{Publisher: pub}
	defer func() {
		if o.verbose {
			fmt.Fprintf(os.Stderr, "drain: claim total %v, publish total %v\n", time.Duration(claimDur.Load()), time.Duration(tp.total.Load()))
		}
	}()
	r, err := relay.New(store, tp, relay.Config{BatchSize: o.batch, OnBatch: func(b relay.BatchResult) {
		claimDur.Add(int64(b.Duration))
		if published.Add(int64(b.Published)) >= int64(o.events) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		return 0, errors.New("relay drain timed out")
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-errc; err != nil {
		return 0, err
	}
	return float64(o.events) / elapsed.Seconds(), nil
}

// drainNaive is the classic loop: claim 100 rows, then for each row a
// synchronous one-message produce and an UPDATE, then commit.
func drainNaive(ctx context.Context, db *sql.DB, brokers []string) (time.Duration, error) {
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: topic, Balancer: &kafkago.Hash{},
		RequiredAcks: kafkago.RequireAll, BatchSize: 1, BatchTimeout: time.Millisecond}
	defer w.Close()
	start := time.Now()
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, event_id, aggregate_id, payload FROM outbox_messages
			WHERE published_at IS NULL ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED`)
		if err != nil {
			tx.Rollback()
			return 0, err
		}
		type row struct {
			id      int64
			eventID string
			key     string
			payload []byte
		}
		var batch []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.eventID, &r.key, &r.payload); err != nil {
				rows.Close()
				tx.Rollback()
				return 0, err
			}
			batch = append(batch, r)
		}
		rows.Close()
		if len(batch) == 0 {
			tx.Rollback()
			return time.Since(start), nil
		}
		for _, r := range batch {
			if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte(r.key), Value: r.payload,
				Headers: []kafkago.Header{{Key: runtime.MetadataEventID, Value: []byte(r.eventID)}}}); err != nil {
				tx.Rollback()
				return 0, err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE outbox_messages SET published_at = now() WHERE id = $1`, r.id); err != nil {
				tx.Rollback()
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
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

// ackRecorder records when the broker acknowledged each message.
type ackRecorder struct {
	message.Publisher
	mu     sync.Mutex
	acks   map[string]time.Time
	pubDur []time.Duration
}

// Publish publishes through the wrapped publisher and records the ack time of each message.
func (a *ackRecorder) Publish(topic string, msgs ...*message.Message) error {
	t0 := time.Now()
	if err := a.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	a.pubDur = append(a.pubDur, now.Sub(t0))
	for _, m := range msgs {
		a.acks[m.UUID] = now
	}
	a.mu.Unlock()
	return nil
}

// latency runs the relay with defaults while 8 producers commit one event per
// transaction at the offered rate; latency is from the producer's commit
// returning to the broker's ack of that event.
func latency(ctx context.Context, db *gorm.DB, store *sqlstore.Store, pub message.Publisher, o options) (p50, p99 time.Duration, n int, err error) {
	if err := db.Exec(`TRUNCATE outbox_messages`).Error; err != nil {
		return 0, 0, 0, err
	}
	accts := make([]Account, o.aggregates)
	if err := db.Create(&accts).Error; err != nil {
		return 0, 0, 0, err
	}
	// No checkpoint pending from the drain runs (superuser only; skipped
	// otherwise). The outbox keeps the planner statistics of the drain runs,
	// as a production outbox has them; with -latency-only the table looks
	// empty to the planner for its first minute, which slows claims.
	_ = db.Exec(`CHECKPOINT`).Error
	rec := &ackRecorder{Publisher: pub, acks: map[string]time.Time{}}
	var bmu sync.Mutex
	var batches []relay.BatchResult
	r, err := relay.New(store, rec, relay.Config{OnBatch: func(b relay.BatchResult) {
		bmu.Lock()
		batches = append(batches, b)
		bmu.Unlock()
	}})
	if err != nil {
		return 0, 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	<-r.Running()

	total := int(float64(o.rate) * o.duration.Seconds())
	commits := make([]time.Time, total)
	ids := make([]string, total)
	jobs := make(chan int, 1024)
	var wg sync.WaitGroup
	var perr atomic.Pointer[error]
	for w := range o.producers {
		wg.Go(func() {
			for i := range jobs {
				a := Account{ID: accts[(i*o.producers+w)%len(accts)].ID}
				a.Balance = int64(i)
				a.Record(newEvent(i))
				ids[i] = a.OutboxRecorder().Pending()[0].ID.String()
				if err := db.Model(&a).Updates(map[string]any{"balance": a.Balance}).Error; err != nil {
					perr.CompareAndSwap(nil, &err)
				}
				commits[i] = time.Now()
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(o.rate)
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing the offered load
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if e := perr.Load(); e != nil {
		return 0, 0, 0, *e
	}
	deadline := time.Now().Add(time.Minute)
	for {
		rec.mu.Lock()
		got := len(rec.acks)
		rec.mu.Unlock()
		if got >= total {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("latency run: %d of %d events acknowledged", got, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		return 0, 0, 0, err
	}
	lat := make([]time.Duration, 0, total)
	rec.mu.Lock()
	for i, id := range ids {
		d := rec.acks[id].Sub(commits[i])
		if d < 0 {
			d = 0 // the relay saw the row before Commit returned to the producer
		}
		lat = append(lat, d)
	}
	rec.mu.Unlock()
	slices.Sort(lat)
	if o.verbose {
		var durs []time.Duration
		sizes := 0
		for _, b := range batches {
			durs = append(durs, b.Duration)
			sizes += b.Claimed
		}
		slices.Sort(durs)
		slices.Sort(rec.pubDur)
		fmt.Fprintf(os.Stderr, "publish p50 %v p99 %v max %v\n", rec.pubDur[len(rec.pubDur)/2], rec.pubDur[len(rec.pubDur)*99/100], rec.pubDur[len(rec.pubDur)-1])
		fmt.Fprintf(os.Stderr, "batches %d, mean size %.1f, claim duration p50 %v p99 %v max %v\n", len(durs), float64(sizes)/float64(len(durs)),
			durs[len(durs)/2], durs[len(durs)*99/100], durs[len(durs)-1])
	}
	return lat[len(lat)/2], lat[len(lat)*99/100], total, nil
}

func openSchema(dsn string) (*gorm.DB, func(), error) {
	admin, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, nil, err
	}
	schema := fmt.Sprintf("relaybench_%d", time.Now().UnixNano())
	if err := admin.Exec(`CREATE SCHEMA ` + schema).Error; err != nil {
		return nil, nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, nil, err
	}
	return db, func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
		admin.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		if s, err := admin.DB(); err == nil {
			s.Close()
		}
	}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	u.RawQuery = ""
	return u.Redacted()
}
