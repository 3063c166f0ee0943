package main

//go:generate go tool outboxgen events.yaml

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func main() {
	// An interrupt cancels the run, which then drops its schema on the way
	// out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		os.Exit(1)
	}
}

type options struct {
	dsn            string
	events         int
	naive          int
	payload        int
	aggregates     int
	relays         []int
	batch          int
	reps           int
	rate           int
	producers      int
	duration       time.Duration
	consumerEvents int
	idle           time.Duration
	only           map[string]bool
	verbose        bool
	cpuprofile     string

	bigEvents     int
	bigBytes      int
	maxBatchBytes int64
	rssLimit      int64

	brokerURLs string
	mysqlURL   string
	soakEvents int

	history int

	retentionEvents  int
	retentionPending int

	// loads are the modes the sections run in, in order: false quiet,
	// true under load (see load.go).
	loads []bool
	load  loadConfig
}

// sections are the parts of the comparison, in the order they run.
var sections = []string{"relay", "latency", "save", "consumer", "idle"}

// Account is the benchmark's aggregate.
type Account struct {
	ID      int64 `gorm:"primaryKey"`
	Balance int64
	runtime.Recorder
}

const topic = "bench.account"

// relayStore is what the program needs of the outbox store.
type relayStore interface {
	relay.Store
	Close() error
}

// newStore returns the outbox store the relay reads, with its defaults, on
// db's connection pool. It is the program's only place that builds one.
func newStore(db *gorm.DB) (relayStore, error) {
	return newStoreWith(db, sqlstore.StoreConfig{})
}

// newStoreWith is newStore with cfg instead of the defaults.
func newStoreWith(db *gorm.DB, cfg sqlstore.StoreConfig) (relayStore, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	return sqlstore.NewStore(databasesql.New(sqlDB), cfg)
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("relaybench", flag.ContinueOnError)
	var o options
	var relays, only string
	var latencyOnly bool
	fs.StringVar(&o.dsn, "database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL")
	fs.IntVar(&o.events, "events", 50_000, "events pre-filled for each drain of the relay section (and the broker mode)")
	fs.IntVar(&o.naive, "naive-events", 0, "events for the naive relay's and the forwarder's drains, the slow ones (default: -events)")
	fs.IntVar(&o.payload, "payload", 236, "size of each event's JSON payload, in bytes (at least 120)")
	fs.IntVar(&o.aggregates, "aggregates", 1000, "distinct aggregates the events belong to")
	fs.StringVar(&relays, "relays", "1,2,4", "relay section: the instance counts of our relay to drain with; broker mode: the counts of relays sharing the outbox (StoreConfig.MaxActiveRelays 64) to drain through each broker with (default 1)")
	fs.IntVar(&o.batch, "batch", 0, "BatchSize of our relay and the batched relay's claim (default: the relay's default, 1000)")
	fs.IntVar(&o.reps, "reps", 3, "repetitions of every measurement, interleaved")
	fs.IntVar(&o.rate, "rate", 1000, "latency section: offered events/s")
	fs.IntVar(&o.producers, "producers", 8, "latency and save sections: writer goroutines")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "latency and save sections: length of each run")
	fs.IntVar(&o.history, "history", 50_000, "latency and save sections: published rows each outbox holds, analyzed, before each run (retention)")
	fs.IntVar(&o.consumerEvents, "consumer-events", 20_000, "consumer section: events consumed per run")
	fs.DurationVar(&o.idle, "idle", 5*time.Second, "idle section: length of each CPU measurement")
	fs.StringVar(&only, "only", strings.Join(sections, ","), "comma-separated sections to run: "+strings.Join(sections, ", "))
	fs.BoolVar(&latencyOnly, "latency-only", false, "the same as -only latency")
	fs.BoolVar(&o.verbose, "v", false, "print progress to stderr")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of our relay's first 1-instance drain to this file")
	fs.IntVar(&o.bigEvents, "big-events", 0, "large-event mode: drain this many events of -big-bytes and report peak RSS (skips the sections)")
	fs.IntVar(&o.bigBytes, "big-bytes", 900_000, "payload size of each large event")
	fs.Int64Var(&o.maxBatchBytes, "max-batch-bytes", 0, "relay MaxBatchBytes in the large-event mode (default: the relay's default, 8 MiB)")
	fs.Int64Var(&o.rssLimit, "rss-limit", 8<<30, "large-event mode: exit with status 3 when the RSS exceeds this many bytes (0: no limit)")
	fs.IntVar(&o.soakEvents, "soak-events", 0, "soak mode: publish this many events through one relay while the outbox is fed and retention runs, and print RSS and heap at each tenth (skips the sections)")
	fs.IntVar(&o.retentionEvents, "retention-compare", 0, "retention mode: fill a plain and a day-partitioned outbox with this many events over 10 days, drain, run retention (7 days), and print relay speed, retention time and table size (skips the sections)")
	fs.IntVar(&o.retentionPending, "retention-pending", 200_000, "retention mode: the newest events left pending for the relay to drain, before and after the retention")
	var loadMode string
	var burnMode bool
	dl := defaultLoad()
	fs.StringVar(&loadMode, "load", "quiet", "sections: quiet (nothing added), loaded (under the load of -load-cpu and -load-db, from a second process) or both (quiet, then loaded)")
	fs.IntVar(&o.load.cpu, "load-cpu", dl.cpu, "loaded mode: goroutines spinning on the CPU")
	fs.IntVar(&o.load.db, "load-db", dl.db, "loaded mode: database connections committing pgbench-style transactions in a loop")
	fs.BoolVar(&burnMode, "burn", false, "internal: be the loaded mode's second process")
	fs.StringVar(&o.brokerURLs, "broker-urls", "", "broker mode: comma-separated broker URLs (adapters/broker; kafka://kfake starts one in-process) to drain the same pre-filled outbox through, and nothing else")
	fs.StringVar(&o.mysqlURL, "mysql-url", "", "MySQL/MariaDB mode: a go-sql-driver DSN (e.g. root@tcp(127.0.0.1:3306)/): drain -events with our relay, 1 with defaults and each -relays count above 1 sharing, in a database of its own there, and print events/s and the ratios to one relay (skips the sections)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h printed the usage: not a failure
			return nil
		}
		return err
	}
	if burnMode {
		return burn(ctx, o.dsn, o.load, out)
	}
	switch loadMode {
	case "quiet":
		o.loads = []bool{false}
	case "loaded":
		o.loads = []bool{true}
	case "both":
		o.loads = []bool{false, true}
	default:
		return fmt.Errorf("-load: %q is not quiet, loaded or both", loadMode)
	}
	if o.load.cpu < 0 || o.load.db < 0 {
		return errors.New("-load-cpu and -load-db must not be negative")
	}
	if o.naive == 0 {
		o.naive = o.events
	}
	if latencyOnly {
		only = "latency"
	}
	o.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(sections, s) {
			return fmt.Errorf("-only: unknown section %q (want some of %s)", s, strings.Join(sections, ","))
		}
		o.only[s] = true
	}
	for _, s := range strings.Split(relays, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
			return fmt.Errorf("-relays: %q is not a positive count", s)
		}
		o.relays = append(o.relays, n)
	}
	switch {
	case o.events < 1 || o.naive < 1 || o.aggregates < 1 || o.reps < 1 || o.rate < 1 || o.producers < 1 || o.consumerEvents < 1:
		return errors.New("-events, -naive-events, -aggregates, -reps, -rate, -producers and -consumer-events must be positive")
	case o.batch < 0:
		return errors.New("-batch must not be negative")
	}
	if o.bigEvents > 0 {
		return bigRun(ctx, o, out)
	}
	if o.soakEvents > 0 {
		return soakRun(ctx, o, out)
	}
	if o.retentionEvents > 0 {
		if o.retentionPending < 1 || o.retentionPending > o.retentionEvents {
			return errors.New("-retention-pending must be between 1 and -retention-compare")
		}
		return retentionRun(ctx, o, out)
	}
	if o.mysqlURL != "" {
		return mysqlRun(ctx, o, out)
	}
	if o.brokerURLs != "" {
		relaysSet := false
		fs.Visit(func(f *flag.Flag) { relaysSet = relaysSet || f.Name == "relays" })
		if !relaysSet {
			o.relays = []int{1} // the broker mode's default
		}
		return brokerRun(ctx, o, out)
	}
	return compare(ctx, o, args, out)
}

// openSchema creates a schema of its own in dsn's database and returns a
// GORM database on it, the URL whose search_path is that schema, and the
// function that closes the database and drops the schema.
func openSchema(dsn string) (*gorm.DB, string, func(), error) {
	admin, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, "", nil, err
	}
	schema := fmt.Sprintf("relaybench_%d", time.Now().UnixNano())
	if err := admin.Exec(`CREATE SCHEMA ` + schema).Error; err != nil {
		return nil, "", nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, "", nil, err
	}
	return db, u.String(), func() {
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
