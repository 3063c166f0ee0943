package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/metrics"
	"github.com/gooutbox/outbox/runtime/health"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// openBroker opens the relay's publisher on the broker at url
// (package adapters/broker).
func openBroker(ctx context.Context, url string, log *slog.Logger) (message.Publisher, func() error, error) {
	b, err := broker.Open(ctx, url, broker.Config{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return b.Publisher(), b.Close, nil
}

// logger returns the command's logger: text on stderr, or JSON with --json.
func logger(e *env, fs *flagSet, verbose bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if verbose {
		opts.Level = slog.LevelDebug
	}
	if fs.json {
		return slog.New(slog.NewJSONHandler(e.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts))
}

// retentionFlags are the flags of the retention, shared by relay and
// janitor.
type retentionFlags struct {
	published, inbox, interval time.Duration
	inboxTable                 string
	batch                      int
}

// register defines the flags in fs: publishedFlag, whose absence means
// publishedDefault, and the others.
func (r *retentionFlags) register(fs *flagSet, publishedFlag, publishedDefault, publishedUsage string) {
	fs.ageVar(&r.published, publishedFlag, publishedDefault, publishedUsage)
	fs.ageVar(&r.inbox, "inbox-retention", "no inbox retention", "also delete inbox markers older than `age` (7d), of every consumer in --inbox-table on the same database (default: off)")
	fs.StringVar(&r.inboxTable, "inbox-table", "", "inbox `table` (default: outbox_inbox)")
	fs.ageVar(&r.interval, "retention-interval", "the default, 1m", "`interval` between retention passes (90s, 15m; default: 1m)")
	fs.countVar(&r.batch, "retention-batch", 1, 0, "rows per retention delete statement", "the default, 1000", "rows per retention delete `statement` (default: 1000)")
}

// retention returns the retention the flags ask for, or nil.
func (r *retentionFlags) retention(db *database, log *slog.Logger) (*sqlstore.Retention, error) {
	if r.published == 0 && r.inbox == 0 {
		return nil, nil
	}
	cfg := sqlstore.RetentionConfig{
		PublishedAge: r.published, InboxAge: r.inbox, Interval: r.interval, BatchSize: r.batch, Logger: log,
	}
	store := db.store
	if r.published == 0 {
		store = nil // the inbox only
	}
	if r.inbox > 0 {
		inbox, err := sqlstore.NewInbox(db.dialect, r.inboxTable, time.Minute)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		cfg.Inbox, cfg.InboxDB = inbox, databasesql.New(db.db)
	}
	ret, err := sqlstore.NewRetention(store, cfg)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return ret, nil
}

// checkInbox returns the error of the inbox table when --inbox-retention
// asks for one and it is missing: each pass would fail on it alike, and
// the command prints the missing-table hint.
func (r *retentionFlags) checkInbox(ctx context.Context, db *database) error {
	if r.inbox == 0 {
		return nil
	}
	return checkTable(ctx, db, cmp.Or(r.inboxTable, sqlstore.InboxDefaultTable))
}

func relayCommand() *command {
	c := &command{
		name: "relay", args: "--broker <url>",
		summary: "run a relay: publish the outbox to a broker until SIGINT/SIGTERM",
		help: `Runs a relay process: it publishes the committed messages of the outbox to the
broker named by --broker (or $OUTBOX_BROKER_URL), in order per aggregate,
until it receives SIGINT or SIGTERM; then it finishes the batch in flight,
hands its share of the outbox to the other relays and exits 0. Run several
for availability: one publishes and the others stand by, taking over within
a lease (15s) of its death, or at once when it stops cleanly. With
--max-active-relays N, up to N relays publish at once, sharing the outbox
by aggregate: worth it when the broker, not the database, limits one relay.
A relay of which nothing reaches the broker for --hand-over-after (15s; it
is cut off from the broker, say) while other relays are alive hands its
shards over to them and stands aside as long, then joins again as a standby.

Broker URLs (package adapters/broker): kafka://host:9092, amqp://user:pass@host:5672/,
nats://host:4222, redis://host:6379/0, postgres://..., sqs://host:port,
sns://host:port, eventbridge:///bus (AWS; no order),
servicebus://NS.servicebus.windows.net?key_name=K&key=V (Azure), memory:// (in-process, for trials: refused unless
--allow-local-broker, as nothing outside the relay can read it).

With --delete-published (also with --cdc table), a published message is deleted instead of marked
(StoreConfig.DeletePublished): the cheapest mark, but "outbox replay" has
nothing to republish and an event saved again after it was published is
published again (see the README, "No retention at all"). Otherwise, with
--retention, the process also deletes published messages older than
that age, in small batches that never block writers or the relay (see
"outbox help janitor"). With --listen, it serves Prometheus metrics at
/metrics (package adapters/metrics) and health checks at /livez (the relay
is making progress) and /readyz (also: the database answers, the broker
answers a ping on kafka, amqp, nats and redis, the oldest pending message
is younger than --max-backlog-age). Logs go to stderr (JSON
with --json).

A relay started while its database or broker does not answer (a
connection refused, a timeout, a name that does not resolve, a server
starting up) waits for them, logging a WARN per try (1s apart, doubling to
30s). It fails at once on what waiting would not mend: a bad --broker URL
(exit 2), a database that refuses it (no such database, a password
refused) or a missing table, the outbox's or the inbox --inbox-retention
prunes (exit 1).

On MySQL and MariaDB the relay's connections get readTimeout=10s and
writeTimeout=10s (its store timeout) unless the URL sets them: the driver's
COMMIT takes no context, and a half-open connection would otherwise stall
the relay until TCP gives up.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		brokerURL := fs.String("broker", e.getenv("OUTBOX_BROKER_URL"), "broker `URL` (default: $OUTBOX_BROKER_URL)")
		var cfg relay.Config
		var scfg sqlstore.StoreConfig
		// Each flag of a relay.Config or sqlstore.StoreConfig field refuses,
		// naming itself, what the field would refuse (a negative value,
		// named as the Go field) or read as its default (zero).
		fs.countVar(&cfg.BatchSize, "batch", 1, 0, "messages per claim", fmt.Sprintf("the default, %d", relay.DefaultBatchSize),
			fmt.Sprintf("claim up to `N` messages at once (default: %d)", relay.DefaultBatchSize))
		fs.durationVar(&cfg.PollInterval, "poll", "the default: 1s on PostgreSQL, 100ms elsewhere",
			"poll `interval` (default: 1s on PostgreSQL, which also listens; 100ms elsewhere)")
		// attempts is an int column: at most math.MaxInt32.
		fs.countVar(&scfg.MaxAttempts, "max-attempts", 0, math.MaxInt32, "failed attempts", "0, never park",
			"park a message after `N` failed attempts (default: 0, never)")
		retryDelay := fs.durationVar(&scfg.RetryDelay, "retry-delay", "the default, 1s",
			"first retry `delay` of a failed message, doubling (default: 1s)")
		fs.durationVar(&scfg.MaxRetryDelay, "max-retry-delay", "the default, 30s", "cap the retry delay at this `duration` (default: 30s)")
		cfg.ShutdownTimeout = 20 * time.Second
		fs.durationVar(&cfg.ShutdownTimeout, "shutdown-timeout", "the default, 20s", "on a signal, finish the batch in flight within this `duration`")
		fs.countVar(&scfg.MaxActiveRelays, "max-active-relays", 1, sqlstore.Shards, "relays", "the default, 1",
			fmt.Sprintf("up to `N` relays on this outbox publish at once, the others standing by (default: 1; %d lets every relay take a share)", sqlstore.Shards))
		fs.durationVar(&cfg.HandOverAfter, "hand-over-after", "the default, 15s",
			"hand this relay's shards over to the other relays alive once nothing it claimed could be published for this `duration` (default: 15s)")
		fs.BoolVar(&scfg.DeletePublished, "delete-published", false, "delete a message once published instead of marking it: faster, but no replay and no deduplication of a re-saved published event (the consumers' inbox still applies it once)")
		allowLocal := fs.Bool("allow-local-broker", false, "allow a broker only this process can read (memory://), for a demo: what it publishes is marked published in the outbox and gone when the relay exits")
		migrate := fs.Bool("migrate", false, "create the outbox table if it does not exist")
		cdcSlot := fs.String("cdc-slot", "", "with --cdc: the replication `slot` (default: <table>_cdc; the publication has its name)")
		cdcMode := fs.String("cdc", "", "PostgreSQL: relay by tailing the transaction log instead of polling, from the `mode`'s events: table (the outbox table's rows) or messages (logical decoding messages); sets up the replication slot first (see outbox help cdc)")
		verbose := fs.Bool("v", false, "debug logs")
		listen := fs.String("listen", "", "serve /metrics, /livez and /readyz on this `address` (host:port; default: off)")
		var maxBacklog time.Duration
		fs.ageVar(&maxBacklog, "max-backlog-age", "the default, 5m", "readiness fails when the oldest pending message is older than this `age` (default: 5m)")
		var rf retentionFlags
		rf.register(fs, "retention", "no retention", "also delete published messages older than `age` (7d, 36h; default: off)")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("relay takes flags, no arguments (got %q)", pos)
		}
		if *brokerURL == "" {
			return usagef("no broker: give --broker URL or set OUTBOX_BROKER_URL")
		}
		// Before the relay waits for its database.
		if err := checkBrokerURL(*brokerURL); err != nil {
			return err
		}
		if localBroker(*brokerURL) && !*allowLocal {
			return &flagError{Flag: "--broker", Value: *brokerURL, Want: "a shared broker, not one only this process can read (the relay would mark real outbox rows published into a log nobody else sees); --allow-local-broker allows it for a demo"}
		}
		// MaxRetryDelay caps RetryDelay's doubling, and its first value
		// too (30s: StoreConfig's default).
		if maxDelay := cmp.Or(scfg.MaxRetryDelay, 30*time.Second); scfg.RetryDelay > maxDelay {
			return &flagError{Flag: "--retry-delay", Value: retryDelay.text,
				Want: fmt.Sprintf("at most --max-retry-delay (%v), which caps it (leave the flag out for the default, 1s)", maxDelay)}
		}
		var cdcCfg *pgcdc.Config
		if *cdcMode != "" {
			_, dsn, d, err := parseDatabaseURL(fs.db)
			if err != nil {
				return err
			}
			if d != sqlstore.Postgres {
				return &flagError{Flag: "--cdc", Value: *cdcMode, Want: "a postgres:// --db: the CDC relay streams from PostgreSQL's logical replication (on MySQL and MariaDB, leave the flag out for the polling relay)"}
			}
			cdcCfg = &pgcdc.Config{ConnString: dsn, Table: fs.table, Mode: pgcdc.Mode(*cdcMode), Slot: *cdcSlot, DeletePublished: scfg.DeletePublished}
			if err := cdcCfg.Validate(); err != nil {
				return &flagError{Flag: "--cdc", Value: *cdcMode, Want: "table or messages (" + err.Error() + ")"}
			}
		}
		if *cdcSlot != "" && cdcCfg == nil {
			return usagef("--cdc-slot needs --cdc")
		}
		if scfg.DeletePublished && rf.published > 0 {
			return usagef("--retention has nothing to delete with --delete-published")
		}
		log := logger(e, fs, *verbose)
		cfg.Logger = log
		fs.mysqlDeadlines = relay.DefaultStoreTimeout
		// --listen answers from the start: while the relay waits for its
		// database or broker, /livez says it is alive (a restart would not
		// help) and /readyz that it is not ready.
		var mon *monitor
		if *listen != "" {
			if mon, err = listenMonitoring(e.ctx, *listen, log); err != nil {
				return err
			}
			defer mon.stop()
		}
		// A relay started while its database or broker is down (a deploy
		// beside an outage, a restart during one) waits for them, logging
		// each try, as it does once running; a bad URL still fails at once.
		var db *database
		err = untilReachable(e.ctx, log, "database", func() (err error) {
			db, err = openDatabase(e.ctx, fs, scfg)
			return err
		})
		if err != nil {
			return stoppedOr(e, log, err)
		}
		defer db.Close() // after the relay: releases its leases
		if *migrate {
			if err := sqlstore.Migrate(e.ctx, databasesql.New(db.db), sqlstore.Schema{Dialect: db.dialect, Outbox: true, OutboxTable: fs.table}); err != nil {
				return err
			}
		}
		// A missing table fails every claim the same way: the relay stops
		// here, and the command prints the hint.
		if cdcCfg == nil || cdcCfg.Mode != pgcdc.Messages { // messages mode has no table
			if err := checkTables(e.ctx, db); err != nil {
				return stoppedOr(e, log, err)
			}
		}
		ret, err := rf.retention(db, log)
		if err != nil {
			return err
		}
		if err := rf.checkInbox(e.ctx, db); err != nil {
			return stoppedOr(e, log, err)
		}
		var (
			pub         message.Publisher
			closeBroker func() error
		)
		// The relay takes no shard before its broker answered: opening a
		// publisher contacts nothing for some adapters (kafka-go dials at
		// the first write), so a publisher that can ping is pinged too.
		err = untilReachable(e.ctx, log, "broker", func() (err error) {
			pub, closeBroker, err = e.openPublisher(e.ctx, *brokerURL, log)
			switch {
			case err == nil:
				if err = pingBroker(e.ctx, pub); err != nil {
					_ = closeBroker()
					err = fmt.Errorf("%w: %w", errUnreachable, err)
				}
			case errors.Is(err, broker.ErrInvalidURL), errors.Is(err, broker.ErrUnknownScheme):
				return brokerFlagError(*brokerURL, err)
			default:
				err = fmt.Errorf("%w: %w", errUnreachable, err)
			}
			return err
		})
		if err != nil {
			return stoppedOr(e, log, err)
		}
		defer closeBroker()
		var store relay.Store = db.store
		mcfg := metrics.Config{Store: db.store}
		if cdcCfg != nil {
			cdcCfg.Logger = log
			cs, err := pgcdc.Open(e.ctx, *cdcCfg)
			if err != nil {
				return err
			}
			defer cs.Close() // after the relay
			store, mcfg.SlotLag = cs, cs
		}
		var m *metrics.Metrics
		if *listen != "" {
			if m, err = metrics.New(mcfg); err != nil {
				return err
			}
			cfg.OnBatch = m.ObserveBatch
		}

		r, err := relay.New(store, pub, cfg)
		if err != nil {
			return usageError{err.Error()}
		}
		if m != nil {
			if err := m.SetRelay(r); err != nil {
				return err
			}
		}
		if mon != nil {
			if err := mon.serve(m, r, db, pub, maxBacklog); err != nil {
				return err
			}
		}
		log.Info("relay starting", slog.String("table", db.table), slog.String("dialect", string(db.dialect)),
			slog.String("broker", redactURL(*brokerURL)), slog.Duration("retention", rf.published))
		var wg sync.WaitGroup
		if ret != nil {
			wg.Go(func() { _ = ret.Run(e.ctx) })
		}
		err = r.Run(e.ctx)
		wg.Wait()
		if errors.Is(err, context.Canceled) || (err == nil && e.ctx.Err() != nil) {
			return nil // Run logged the stop, and what became of the batch in flight
		}
		return err
	}
	return c
}

// checkBrokerURL returns the *flagError of a --broker URL that names no
// scheme, or one package adapters/broker does not know, or does not
// parse; its parameters are checked when it is opened.
func checkBrokerURL(raw string) error {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return brokerFlagError(raw, errors.New("no scheme"))
	}
	if _, err := url.Parse(raw); err != nil {
		return brokerFlagError(raw, err)
	}
	if !slices.Contains(broker.Schemes(), strings.ToLower(scheme)) {
		return brokerFlagError(raw, fmt.Errorf("unknown scheme %q", scheme))
	}
	return nil
}

// localBroker reports whether raw is a broker that only the relay's own
// process can read (memory://).
func localBroker(raw string) bool {
	scheme, _, _ := strings.Cut(raw, "://")
	return strings.EqualFold(scheme, "memory")
}

// brokerFlagError returns the *flagError of --broker raw, which err (a
// parse error, or one wrapping broker.ErrInvalidURL or
// broker.ErrUnknownScheme) refused.
func brokerFlagError(raw string, err error) *flagError {
	reason := err.Error()
	var ue *url.Error
	switch {
	case errors.As(err, &ue):
		reason = ue.Err.Error() // ue's text holds the URL, password and all
	case errors.Is(err, broker.ErrUnknownScheme):
		if u, perr := url.Parse(raw); perr == nil {
			reason = fmt.Sprintf("unknown scheme %q", u.Scheme)
		}
	default:
		if _, after, ok := strings.Cut(reason, broker.ErrInvalidURL.Error()+": "); ok {
			reason = after
		}
	}
	return &flagError{Flag: "--broker", Value: redactURL(raw), Want: reason +
		": a broker URL, scheme://host:port/..., of the schemes " + strings.Join(broker.Schemes(), ", ") +
		` (see "outbox help relay")`}
}

// checkTables reads no row of each table migrate creates for db's outbox
// (the outbox, its leases, its relays, ...: the tables of
// sqlstore.OutboxDDL), and returns the error of the first that is
// missing, or does not answer.
func checkTables(ctx context.Context, db *database) error {
	ddl, err := sqlstore.OutboxDDL(db.dialect, db.table)
	if err != nil {
		return err
	}
	var tables []string
	for _, stmt := range ddl {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(stmt), "CREATE TABLE IF NOT EXISTS "); ok {
			table, _, _ := strings.Cut(rest, " ")
			tables = append(tables, table)
		}
	}
	if len(tables) == 0 {
		tables = []string{db.table} // the DDL reads otherwise: the outbox at least
	}
	return checkTable(ctx, db, tables...)
}

// checkTable reads no row of each of tables, and returns the error of the
// first that is missing, or does not answer.
func checkTable(ctx context.Context, db *database, tables ...string) error {
	ctx, cancel := context.WithTimeout(ctx, relay.DefaultStoreTimeout)
	defer cancel()
	for _, table := range tables {
		rows, err := db.db.QueryContext(ctx, "SELECT 1 FROM "+table+" WHERE 1 = 0")
		if err == nil {
			err = rows.Close()
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", table, err)
		}
	}
	return nil
}

// brokerPingTimeout bounds the ping of the broker at start.
const brokerPingTimeout = 5 * time.Second

// pingBroker pings pub's broker when pub can ([health.BrokerPinger]: the
// Kafka, AMQP, NATS and Redis publishers), within brokerPingTimeout.
func pingBroker(ctx context.Context, pub message.Publisher) error {
	p, ok := pub.(health.BrokerPinger)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, brokerPingTimeout)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// startRetryMax caps the wait between tries to reach the database or the
// broker at start.
const startRetryMax = 30 * time.Second

// untilReachable calls open until it succeeds, returns an error that does
// not wrap errUnreachable (a bad URL, a bad setting), or ctx is done. After
// each unreachable try it logs a WARN naming what and waits 1s, doubling up
// to startRetryMax.
func untilReachable(ctx context.Context, log *slog.Logger, what string, open func() error) error {
	wait := time.Second
	for attempt := 1; ; attempt++ {
		err := open()
		if err == nil || !errors.Is(err, errUnreachable) {
			return err
		}
		log.Warn("relay: cannot reach the "+what+"; retrying", slog.Any("error", err),
			slog.Int("attempt", attempt), slog.Duration("backoff", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, startRetryMax)
	}
}

// stoppedOr returns nil, after logging that the relay stopped, when err
// is the command's context ending (a signal while waiting at start), and
// err otherwise.
func stoppedOr(e *env, log *slog.Logger, err error) error {
	if e.ctx.Err() != nil && errors.Is(err, e.ctx.Err()) {
		log.Info("relay: stopped before it started")
		return nil
	}
	return err
}

func janitorCommand() *command {
	c := &command{
		name: "janitor", args: "[--published-age 7d] [--inbox-retention 7d] [--inbox-only] [--once]",
		summary: "delete old published messages (and inbox markers) on a schedule",
		help: `Deletes published messages older than --published-age (and, with
--inbox-retention, inbox markers older than that age) every
--retention-interval, until SIGINT or SIGTERM; with --once, one pass, then it
prints what it deleted and exits. A consumer whose inbox lives on a database
of its own, without the outbox: --inbox-only --inbox-retention 7d, with --db
naming that database.

Each batch is its own short transaction that waits for no row lock:
PostgreSQL deletes "WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)" and
checks the row again; MySQL/MariaDB selects the batch FOR UPDATE SKIP LOCKED
under READ COMMITTED (no gap locks) and deletes it by primary key; SQLite
holds its write lock for one batch. Writers only insert, and the relay only
updates pending rows, so neither waits for it. Pending and parked messages
are never deleted.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		var rf retentionFlags
		rf.register(fs, "published-age", "the default, 7d", "delete published messages older than `age` (default: 7d)")
		once := fs.Bool("once", false, "run one pass and exit")
		inboxOnly := fs.Bool("inbox-only", false, "prune only the inbox markers (--inbox-retention), on a consumer's database without the outbox")
		verbose := fs.Bool("v", false, "debug logs")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("janitor takes flags, no arguments (got %q)", pos)
		}
		switch {
		case *inboxOnly && rf.inbox == 0:
			return usagef("janitor --inbox-only needs --inbox-retention")
		case *inboxOnly && rf.published > 0:
			return usagef("janitor --inbox-only deletes no published messages: leave --published-age out")
		case !*inboxOnly:
			rf.published = cmp.Or(rf.published, sqlstore.DefaultRetentionAge)
		}
		log := logger(e, fs, *verbose)
		db, err := openDatabase(e.ctx, fs, sqlstore.StoreConfig{})
		if err != nil {
			return err
		}
		defer db.Close()
		ret, err := rf.retention(db, log)
		if err != nil {
			return err
		}
		// What every pass would fail on alike ends the command at once.
		if rf.published > 0 {
			if err := checkTable(e.ctx, db, db.table); err != nil {
				return err
			}
		}
		if err := rf.checkInbox(e.ctx, db); err != nil {
			return err
		}
		if !*once {
			return ret.Run(e.ctx)
		}
		res := ret.RunOnce(e.ctx)
		if res.Err != nil {
			return res.Err
		}
		if fs.json {
			return writeJSON(e.stdout, map[string]any{
				"published_deleted": res.Published, "inbox_deleted": res.Inbox, "batches": res.Batches,
				"seconds": res.Duration.Seconds(), "partitions_dropped": res.PartitionsDropped,
				"partitions_created": res.PartitionsCreated, "partitions_kept": res.PartitionsKept,
				"partition_rows_moved": res.PartitionRowsMoved,
			})
		}
		if *inboxOnly {
			fmt.Fprintf(e.stdout, "deleted %d inbox markers in %d batches (%s)\n", res.Inbox, res.Batches, age(res.Duration))
		} else {
			fmt.Fprintf(e.stdout, "deleted %d published rows and %d inbox markers in %d batches (%s)\n",
				res.Published, res.Inbox, res.Batches, age(res.Duration))
		}
		if res.PartitionsDropped+res.PartitionsCreated+len(res.PartitionsKept) > 0 {
			fmt.Fprintf(e.stdout, "partitions: %d dropped (about %d rows), %d created ahead, %d kept for unpublished rows %v\n",
				res.PartitionsDropped, res.PartitionRows, res.PartitionsCreated, len(res.PartitionsKept), res.PartitionsKept)
		}
		if res.PartitionRowsMoved > 0 {
			fmt.Fprintf(e.stdout, "partitions: moved %d rows from the DEFAULT partition into the partitions created\n", res.PartitionRowsMoved)
		}
		return nil
	}
	return c
}

// monitor is the --listen server of a relay process. It answers from
// the start: until serve, /livez is 200 and /readyz and /metrics are 503
// ("starting"), while the relay waits for its database and broker.
type monitor struct {
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
}

// listenMonitoring listens on addr and serves the starting answers.
func listenMonitoring(ctx context.Context, addr string, log *slog.Logger) (*monitor, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	m := &monitor{}
	starting := http.NewServeMux()
	starting.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok: starting, waiting for the database and the broker")
	})
	starting.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "starting: waiting for the database and the broker", http.StatusServiceUnavailable)
	})
	var h http.Handler = starting
	m.handler.Store(&h)
	m.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*m.handler.Load()).ServeHTTP(w, r) }),
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() { _ = m.srv.Serve(ln) }()
	log.Info("serving metrics and health checks", slog.String("address", ln.Addr().String()))
	return m, nil
}

// stop closes the server.
func (m *monitor) stop() { _ = m.srv.Close() }

// serve switches to the relay's metrics and health checks.
// /readyz also pings the broker when the publisher can (a
// health.BrokerPinger: kafka, amqp, nats, redis), so that a relay that
// cannot reach its broker is not ready.
func (m *monitor) serve(metricsCol *metrics.Metrics, r *relay.Relay, db *database, pub message.Publisher, maxBacklog time.Duration) error {
	cfg := health.Config{
		Relay: r,
		DB:    db.db,
		OldestPending: func(ctx context.Context) (time.Duration, error) {
			st, err := db.store.Stats(ctx)
			return st.OldestPending, err
		},
		MaxOldestPending: maxBacklog,
	}
	if p, ok := pub.(health.BrokerPinger); ok {
		cfg.Broker = p
	}
	checker, err := health.New(cfg)
	if err != nil {
		return usageError{err.Error()}
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(metricsCol); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /livez", checker.Liveness())
	mux.Handle("GET /readyz", checker.Readiness())
	var h http.Handler = mux
	m.handler.Store(&h)
	return nil
}
