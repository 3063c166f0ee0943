// Command quickstart shows gooutbox end to end, the way an application
// writes it: Order aggregates record generated events; GORM saves them, some
// in transactions that roll back, and the hooks plugin writes their events to
// the outbox table in the same transactions; the relay publishes the committed
// ones to Kafka through kafka-go; a shipping service consumes them with
// runtime/consumer in a Watermill router, applying each event once through
// its inbox. It ends with a summary line:
//
//	committed 17, published 17, rolled back 3, ghosts 0, pending in outbox 0
//
// Every third payment is declined, which rolls its event back.
//
// It is the first program of the examples folder, whose rule is: programs
// a user reads and copies, each run by its tests (this one, the README's
// programs in examples/readme, and a sqlc + pgx service in
// examples/sqlcpgx); fault harnesses and benchmarks live in
// adapters/harness.
//
// With no flags it needs nothing installed: SQLite (pure Go) in a temporary
// directory and an in-process Kafka-protocol broker (kfake). -database-url
// (or $DATABASE_URL) uses PostgreSQL instead, -kafka-brokers host:9092 (or
// $KAFKA_BROKERS) a real Kafka cluster, and -broker-url (or $BROKER_URL)
// any broker by URL that the program imports (package adapters/broker).
//
// Measured from a cold start (empty module and build caches:
// GOMODCACHE=$(mktemp -d) GOCACHE=$(mktemp -d)) on an idle 2-vCPU VM,
// 2026-12-07: go run ./examples/quickstart took 57 s and downloaded 139 MB
// of module zips (30 modules), four of which are 124 MB of it: the
// compression codecs every Go Kafka client imports (pierrec/lz4, 42 MB, and
// klauspost/compress, 40 MB, most of both test data) and the pure-Go SQLite
// (modernc.org/sqlite 23 MB and modernc.org/libc 18 MB). It compiles 404
// packages (574 before the adapters moved to modules of their own). With the
// caches warm it runs in about 3 seconds.
//
// With -dashboard it also serves the outbox dashboard (package
// runtime/dashboard) under /outbox/ at that address, and after the summary
// goes on placing an order every -dashboard-every until interrupted, so the
// charts have something to show (-dashboard-actions enables the retry and
// discard buttons):
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -dashboard :8080   # then open http://localhost:8080/outbox/
//	go run ./examples/quickstart -database-url 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' -kafka-brokers 127.0.0.1:9092
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/broker"
	_ "github.com/gooutbox/outbox/adapters/kafka" // kafka:// for broker.Open
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	_ "github.com/gooutbox/outbox/adapters/memory" // memory:// for broker.Open
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/dashboard"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// topic is where the relay publishes the Order events: by default the topic
// is the aggregate type, the GORM model's name in snake_case.
const topic = "order"

type options struct {
	databaseURL  string
	kafkaBrokers string
	brokerURL    string
	orders       int
	verbose      bool
	dashboard    string
	dashActions  bool
	dashEvery    time.Duration
}

// run runs the quickstart with the command-line arguments args. -h prints
// the usage and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt options
	fs.StringVar(&opt.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable (default: $DATABASE_URL, else SQLite in a temporary directory)")
	fs.StringVar(&opt.kafkaBrokers, "kafka-brokers", os.Getenv("KAFKA_BROKERS"), "comma-separated Kafka brokers (default: $KAFKA_BROKERS, else an in-process broker)")
	fs.StringVar(&opt.brokerURL, "broker-url", os.Getenv("BROKER_URL"), "the broker by URL: kafka:// or memory:// (the adapters this program imports; import another's package for its scheme, see adapters/broker; default: $BROKER_URL, else Kafka per -kafka-brokers)")
	fs.IntVar(&opt.orders, "orders", 10, "number of orders to place")
	fs.BoolVar(&opt.verbose, "v", false, "log debug output to stderr (default: warnings only)")
	fs.StringVar(&opt.dashboard, "dashboard", "", "serve the outbox dashboard under /outbox/ at this address (e.g. :8080) and keep placing orders until interrupted")
	fs.BoolVar(&opt.dashActions, "dashboard-actions", false, "with -dashboard: show retry and discard buttons on parked events (default: read-only)")
	fs.DurationVar(&opt.dashEvery, "dashboard-every", time.Second, "with -dashboard: place an order this often after the first ones")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h printed the usage: not a failure
			return nil
		}
		return err
	}
	if opt.orders < 1 {
		return fmt.Errorf("-orders must be at least 1")
	}
	if opt.dashEvery <= 0 {
		return fmt.Errorf("-dashboard-every must be positive")
	}
	logLevel := slog.LevelWarn
	if opt.verbose {
		logLevel = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	wmLog := watermill.NewSlogLogger(log)
	out := &syncWriter{w: stdout}

	// 1. The database: the application's tables, the outbox and the inbox.
	db, dbName, cleanup, err := openDB(opt.databaseURL)
	if err != nil {
		return err
	}
	defer cleanup()
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	if err := db.AutoMigrate(&Order{}, &Shipment{}); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return err
	}
	inbox, err := hooks.NewDriver(db) // GORM as the consumer's driver
	if err != nil {
		return err
	}
	if err := consumer.Migrate(ctx, inbox, ""); err != nil {
		return err
	}

	// 2. The broker, chosen by URL: Kafka (a real cluster, or an in-process
	// one) unless -broker-url names another. broker.Open opens the schemes
	// of the adapters imported above (kafka://, memory://); a program that
	// imports adapters/nats, say, opens nats:// too.
	brokerURL, brokerName := opt.brokerURL, opt.brokerURL
	if brokerURL == "" {
		brokers := splitBrokers(opt.kafkaBrokers)
		brokerName = strings.Join(brokers, ",")
		if len(brokers) == 0 {
			cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1})
			if err != nil {
				return fmt.Errorf("start in-process Kafka: %w", err)
			}
			defer cluster.Close()
			brokers, brokerName = cluster.Addrs(), "in-process Kafka (kfake)"
		}
		brokerURL = "kafka://" + strings.Join(brokers, ",")
	}
	fmt.Fprintf(out, "database: %s; broker: %s\n", dbName, brokerName)
	b, err := broker.Open(ctx, brokerURL, broker.Config{Logger: log})
	if err != nil {
		return err
	}
	defer b.Close()

	// 3. The producing side: the relay, woken by NOTIFY on PostgreSQL and by
	// the plugin after each commit it sees (what SQLite relies on).
	pub := b.Publisher()
	storeDB, err := db.DB()
	if err != nil {
		return err
	}
	store, err := sqlstore.NewStore(databasesql.New(storeDB), sqlstore.StoreConfig{})
	if err != nil {
		return err
	}
	defer store.Close()
	rl, err := relay.New(store, pub, relay.Config{Logger: log})
	if err != nil {
		return err
	}
	plugin, err := hooks.New(hooks.Config{AfterCommit: rl.Notify})
	if err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}

	// The dashboard, when asked for, on the same store.
	if opt.dashboard != "" {
		stopDash, err := serveDashboard(ctx, opt, store, log, out)
		if err != nil {
			return err
		}
		defer stopDash()
	}

	// 4. The consuming side: a shipping service that applies each event
	// once, through its inbox, in a Watermill router.
	shipping := newShipping(out)
	router, err := shipping.router(db, b, pub, log, wmLog)
	if err != nil {
		return err
	}

	runBase := ctx
	if opt.dashboard != "" {
		// Ctrl-C ends placing orders; the relay and the consumer then
		// finish what was committed (stopAll stops them).
		runBase = context.WithoutCancel(ctx)
	}
	runCtx, cancel := context.WithCancel(runBase)
	defer cancel()
	var wg sync.WaitGroup
	relayErr, routerErr := make(chan error, 1), make(chan error, 1)
	wg.Go(func() { relayErr <- rl.Run(runCtx) })
	wg.Go(func() { routerErr <- router.Run(runCtx) })
	stopAll := func() error {
		cancel()
		wg.Wait()
		return errors.Join(<-relayErr, <-routerErr)
	}

	// 5. The application: place every order and pay it; every third
	// payment is declined inside its transaction, which rolls back its
	// event.
	committed, declined, err := placeAndPay(ctx, db, 1, opt.orders)
	if err != nil {
		return errors.Join(err, stopAll())
	}
	shipping.expect(declined)

	// With the dashboard, go on placing orders until interrupted.
	waitCtx := ctx
	if opt.dashboard != "" {
		fmt.Fprintf(out, "placing an order every %v; Ctrl-C to stop\n", opt.dashEvery)
		next := opt.orders + 1
		tick := time.NewTicker(opt.dashEvery)
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				continue
			case <-tick.C:
			}
			// Not cancelled half-way by Ctrl-C: the counts must be exact.
			c, d, err := placeAndPay(context.WithoutCancel(ctx), db, next, 1)
			if err != nil {
				tick.Stop()
				return errors.Join(err, stopAll())
			}
			committed += c
			for id := range d {
				declined[id] = true
			}
			shipping.expect(declined)
			next++
		}
		tick.Stop()
		// Interrupted: still wait for what was committed.
		waitCtx = context.WithoutCancel(ctx)
	}

	// 6. Wait until the consumer has applied every committed event, then
	// stop the relay (it finishes and marks its batch) and the router.
	waitErr := shipping.wait(waitCtx, committed, 30*time.Second)
	if err := errors.Join(waitErr, stopAll()); err != nil {
		return err
	}

	stats, err := store.Stats(waitCtx)
	if err != nil {
		return err
	}
	var shipments int64
	if err := db.WithContext(waitCtx).Model(&Shipment{}).Count(&shipments).Error; err != nil {
		return fmt.Errorf("count shipments: %w", err)
	}
	applied, ghosts := shipping.counts()
	fmt.Fprintf(out, "shipments %d (one per paid order)\n", shipments)
	fmt.Fprintf(out, "committed %d, published %d, rolled back %d, ghosts %d, pending in outbox %d\n",
		committed, applied, len(declined), ghosts, stats.Pending)
	if ghosts != 0 || applied != committed || stats.Pending != 0 {
		return errors.New("the outbox broke its promise")
	}
	return nil
}

var errDeclined = errors.New("card declined")

// placeAndPay runs the application's transactions for orders from to
// from+n-1. It returns how many events committed and the ids of the orders
// whose payment was declined (each rolled back one event).
func placeAndPay(ctx context.Context, db *gorm.DB, from, n int) (committed int, declined map[string]bool, err error) {
	clk := runtime.SystemClock{}
	declined = map[string]bool{}
	for i := from; i < from+n; i++ {
		o := &Order{}
		o.Place(clk, fmt.Sprintf("customer-%d", i), fmt.Sprintf("%d.00", 10*i))
		// A single Create: GORM's own transaction holds the order row and
		// its outbox row.
		if err := db.WithContext(ctx).Create(o).Error; err != nil {
			return 0, nil, fmt.Errorf("place order %d: %w", i, err)
		}
		committed++

		// Paying happens in an application transaction. Every fourth order
		// is paid through the old checkout, which still writes OrderPaid
		// v1. Every third payment is declined after the save, so the whole
		// transaction, event included, rolls back.
		if i%4 == 0 {
			o.PayV1(clk, "card")
		} else {
			o.Pay(clk, "card")
		}
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Save(o).Error; err != nil {
				return err
			}
			if i%3 == 0 {
				return errDeclined
			}
			return nil
		})
		switch {
		case errors.Is(err, errDeclined):
			declined[fmt.Sprint(o.ID)] = true
		case err != nil:
			return 0, nil, fmt.Errorf("pay order %d: %w", i, err)
		default:
			committed++
		}
	}
	return committed, declined, nil
}

// shipping is the consuming service: it prints every event it applies and
// creates a Shipment for every paid order.
type shipping struct {
	out io.Writer

	mu       sync.Mutex
	applied  int             // events applied (each once, thanks to the inbox)
	paid     []string        // orders whose OrderPaid was applied
	declined map[string]bool // orders whose payment rolled back
	changed  chan struct{}
}

func newShipping(out io.Writer) *shipping {
	return &shipping{out: out, changed: make(chan struct{}, 1)}
}

// router returns a Watermill router that feeds the topic's messages to a
// runtime/consumer consumer with an inbox in db.
func (s *shipping) router(db *gorm.DB, b *broker.Broker, dlq message.Publisher, log *slog.Logger, wmLog watermill.LoggerAdapter) (*message.Router, error) {
	reg := runtime.NewRegistry()
	if err := Register(reg); err != nil { // generated: every version of every event
		return nil, err
	}
	drv, err := hooks.NewDriver(db) // handlers take a *gorm.DB
	if err != nil {
		return nil, err
	}
	c, err := consumer.New(reg, consumer.Config{
		Name:                "shipping",
		DB:                  drv,
		DeadLetterPublisher: dlq,
		Logger:              log,
		OnOutcome:           s.outcome,
	})
	if err != nil {
		return nil, err
	}
	err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e OrderPlaced, m consumer.Meta) error {
		fmt.Fprintf(s.out, "consumed %s v%d  order %-3s customer=%s total=%s\n", m.EventType, m.EventVersion, m.AggregateID, e.Customer, e.Total)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e OrderPaid, m consumer.Meta) error {
		amount := "none"
		if e.Amount != nil {
			amount = *e.Amount
		}
		fmt.Fprintf(s.out, "consumed %s v%d  order %-3s method=%s amount=%s channel=%s (as v%d)\n",
			m.EventType, m.EventVersion, m.AggregateID, e.Method, amount, e.Channel, e.EventKey().Version)
		return tx.Create(&Shipment{OrderID: m.AggregateID, Method: e.Method, Channel: e.Channel}).Error
	})
	if err != nil {
		return nil, err
	}

	sub, err := b.Subscriber("quickstart-shipping")
	if err != nil {
		return nil, err
	}
	// Kafka topics are created by whoever subscribes first (or by an
	// operator); the other adapters declare what they need themselves.
	if init, ok := sub.(message.SubscribeInitializer); ok {
		if err := init.SubscribeInitialize(topic); err != nil {
			return nil, err
		}
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, wmLog)
	if err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	router.AddConsumerHandler("shipping", topic, sub, c.HandlerFunc())
	return router, nil
}

// outcome is the consumer's Config.OnOutcome: it counts applied events.
func (s *shipping) outcome(r consumer.Result) {
	if r.Outcome != consumer.OutcomeApplied {
		return
	}
	s.mu.Lock()
	s.applied++
	if r.Meta.EventType == OrderPaidType {
		s.paid = append(s.paid, r.Meta.AggregateID)
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// expect records the orders whose payment rolled back: an OrderPaid for one
// of them would be a ghost.
func (s *shipping) expect(declined map[string]bool) {
	s.mu.Lock()
	s.declined = declined
	s.mu.Unlock()
}

// counts returns the number of events applied and of ghosts among them.
func (s *shipping) counts() (applied, ghosts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.paid {
		if s.declined[id] {
			ghosts++
		}
	}
	return s.applied, ghosts
}

// wait returns once n events have been applied, or an error after timeout.
func (s *shipping) wait(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		applied, _ := s.counts()
		if applied >= n {
			return nil
		}
		select {
		case <-s.changed:
		case <-deadline.C:
			return fmt.Errorf("timed out: the consumer applied %d of %d committed events", applied, n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// syncWriter serialises writes from the consumer's and the main goroutine.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// openDB opens PostgreSQL at url, or SQLite in a new temporary directory
// that cleanup removes.
func openDB(url string) (db *gorm.DB, name string, cleanup func(), err error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	if url != "" {
		db, err := gorm.Open(postgres.Open(url), cfg)
		if err != nil {
			return nil, "", nil, fmt.Errorf("open PostgreSQL: %w", err)
		}
		return db, "PostgreSQL", func() {}, nil
	}
	dir, err := os.MkdirTemp("", "gooutbox-quickstart-")
	if err != nil {
		return nil, "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	path := filepath.Join(dir, "quickstart.db")
	db, err = gorm.Open(sqlite.Open("file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"), cfg)
	if err != nil {
		cleanup()
		return nil, "", nil, fmt.Errorf("open SQLite: %w", err)
	}
	return db, "SQLite " + path, cleanup, nil
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// serveDashboard serves the outbox dashboard under /outbox/ at opt.dashboard
// (and redirects / there) and samples the store for its charts, until the
// returned function is called.
func serveDashboard(ctx context.Context, opt options, store *sqlstore.Store, log *slog.Logger, out io.Writer) (stop func(), err error) {
	dash, err := dashboard.New(store, dashboard.Config{
		AllowActions:   opt.dashActions,
		Title:          "Outbox · quickstart",
		SampleInterval: 2 * time.Second,
		Logger:         log,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", dash))
	mux.Handle("/outbox", http.StripPrefix("/outbox", dash))
	mux.Handle("/{$}", http.RedirectHandler("/outbox/", http.StatusFound))
	ln, err := net.Listen("tcp", opt.dashboard)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	sampleCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = dash.Run(sampleCtx) })
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("dashboard server failed", "error", err)
		}
	})
	host := ln.Addr().String()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		host = net.JoinHostPort("localhost", fmt.Sprint(tcp.Port))
	}
	fmt.Fprintf(out, "dashboard: http://%s/outbox/\n", host)
	return func() {
		shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdownCtx)
		cancel()
		wg.Wait()
	}, nil
}
