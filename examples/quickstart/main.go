// Command quickstart shows gooutbox end to end: Order aggregates are placed
// and paid in GORM transactions (some deliberately rolled back), the GORM
// plugin writes their events to the outbox table in the same transactions,
// the relay publishes the committed ones to Kafka through kafka-go, and a
// consumer reads them back and prints them.
//
// With no flags it needs nothing installed: SQLite (pure Go) in a temporary
// directory and an in-process Kafka-protocol broker (kfake).
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -database-url postgres://postgres@127.0.0.1:5432/test -kafka-brokers 127.0.0.1:9092
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

type options struct {
	databaseURL  string
	kafkaBrokers string
	orders       int
	verbose      bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt options
	fs.StringVar(&opt.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default: $DATABASE_URL, else SQLite in a temp dir)")
	fs.StringVar(&opt.kafkaBrokers, "kafka-brokers", os.Getenv("KAFKA_BROKERS"), "comma-separated Kafka brokers (default: $KAFKA_BROKERS, else an in-process broker)")
	fs.IntVar(&opt.orders, "orders", 10, "number of orders to place")
	fs.BoolVar(&opt.verbose, "v", false, "log the relay's debug output to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if opt.orders < 1 {
		return fmt.Errorf("-orders must be at least 1")
	}
	logLevel := slog.LevelWarn
	if opt.verbose {
		logLevel = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	// 1. The database: the business table and the outbox table.
	db, dbName, cleanup, err := openDB(opt.databaseURL)
	if err != nil {
		return err
	}
	defer cleanup()
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		return fmt.Errorf("migrate orders: %w", err)
	}

	// 2. Kafka: a real cluster, or an in-process one.
	brokers := splitBrokers(opt.kafkaBrokers)
	kafkaName := strings.Join(brokers, ",")
	if len(brokers) == 0 {
		cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1})
		if err != nil {
			return fmt.Errorf("start in-process Kafka: %w", err)
		}
		defer cluster.Close()
		brokers, kafkaName = cluster.Addrs(), "in-process Kafka (kfake)"
	}
	fmt.Fprintf(stdout, "database: %s; broker: %s\n", dbName, kafkaName)

	wmLog := watermill.NewSlogLogger(log)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers}, wmLog)
	if err != nil {
		return err
	}
	defer pub.Close()
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers: brokers, ConsumerGroup: "quickstart-printer", TopicPartitions: 4,
		MaxWait: 100 * time.Millisecond,
	}, wmLog)
	if err != nil {
		return err
	}
	defer sub.Close()
	const topic = "order" // the default topic is the aggregate type
	if err := sub.SubscribeInitialize(topic); err != nil {
		return err
	}

	// 3. The relay, woken by NOTIFY on PostgreSQL and by the plugin after
	// each commit it sees (what SQLite relies on).
	store, err := hooks.NewStore(db, hooks.StoreConfig{})
	if err != nil {
		return err
	}
	var rl *relay.Relay
	plugin, err := hooks.New(hooks.Config{AfterCommit: func() { rl.Notify() }})
	if err != nil {
		return err
	}
	if rl, err = relay.New(store, pub, relay.Config{Logger: log}); err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := rl.Run(runCtx); err != nil {
			log.Error("relay stopped", "error", err)
		}
	})

	// 4. A consumer that decodes through the registry and prints each event.
	reg := runtime.NewRegistry()
	if err := register(reg); err != nil {
		return err
	}
	// The decoders are generated per version: a payload stored as v1 comes
	// out as the latest version (see order.go).
	if err := printUpcast(stdout, reg); err != nil {
		return err
	}
	msgs, err := sub.Subscribe(runCtx, topic)
	if err != nil {
		return err
	}
	var (
		mu       sync.Mutex
		received = map[string]bool{}
		changed  = make(chan struct{}, 1)
	)
	wg.Go(func() {
		for msg := range msgs {
			env, err := runtime.EnvelopeFromMetadata(msg.UUID, msg.Metadata, msg.Payload)
			if err == nil {
				_, err = reg.DecodeEnvelope(env)
			}
			if err != nil {
				fmt.Fprintf(stdout, "consumer: cannot decode message %s: %v\n", msg.UUID, err)
				msg.Ack()
				continue
			}
			fmt.Fprintf(stdout, "consumed %-20s v%d  order %-3s occurred_at %s\n",
				env.EventType, env.EventVersion, env.AggregateID, env.OccurredAt.Format(time.RFC3339Nano))
			mu.Lock()
			received[env.EventID.String()] = true
			mu.Unlock()
			msg.Ack()
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	})

	// 5. The application: place every order; pay most; let some payments
	// fail inside their transaction, which rolls back their events.
	committed, rolledBack, err := placeAndPay(ctx, db, opt.orders)
	if err != nil {
		return err
	}

	// 6. Wait until every committed event has been consumed.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		mu.Lock()
		done := len(received) >= len(committed)
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("timed out: consumed %d of %d committed events", len(received), len(committed))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cancel()
	wg.Wait()

	ghosts, published := 0, 0
	for id := range received {
		if committed[id] {
			published++
		} else {
			ghosts++
		}
	}
	var pending int64
	if err := db.Table("outbox_messages").Where("published_at IS NULL").Count(&pending).Error; err != nil {
		return fmt.Errorf("count pending: %w", err)
	}
	fmt.Fprintf(stdout, "committed %d, published %d, rolled back %d, ghosts %d, pending in outbox %d\n",
		len(committed), published, rolledBack, ghosts, pending)
	if ghosts != 0 || published != len(committed) {
		return errors.New("the outbox broke its promise")
	}
	return nil
}

var errDeclined = errors.New("card declined")

// placeAndPay runs the application's transactions. It returns the ids of
// the committed events and the number of events rolled back.
func placeAndPay(ctx context.Context, db *gorm.DB, n int) (map[string]bool, int, error) {
	clk := runtime.SystemClock{}
	committed := map[string]bool{}
	rolledBack := 0
	pendingIDs := func(o *Order) []string {
		var ids []string
		for _, r := range o.OutboxRecorder().Pending() {
			ids = append(ids, r.ID.String())
		}
		return ids
	}
	for i := 1; i <= n; i++ {
		o := &Order{}
		o.Place(clk, fmt.Sprintf("customer-%d", i), fmt.Sprintf("%d.00", 10*i))
		ids := pendingIDs(o)
		// A single Create: GORM's own transaction holds the order row and
		// its outbox row.
		if err := db.WithContext(ctx).Create(o).Error; err != nil {
			return nil, 0, fmt.Errorf("place order %d: %w", i, err)
		}
		for _, id := range ids {
			committed[id] = true
		}

		// Paying happens in an application transaction; every third
		// payment is declined after the save, so the whole transaction,
		// event included, rolls back.
		o.Pay(clk, "card")
		ids = pendingIDs(o)[len(pendingIDs(o))-1:]
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
			rolledBack += len(ids)
		case err != nil:
			return nil, 0, fmt.Errorf("pay order %d: %w", i, err)
		default:
			for _, id := range ids {
				committed[id] = true
			}
		}
	}
	return committed, rolledBack, nil
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
