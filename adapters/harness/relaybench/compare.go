package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver of the baselines
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/pgcdc"
)

// warmTopic receives the messages that warm publishers up, so that they
// are not counted as the paths' events.
const warmTopic = "bench.warm"

// bench is the comparison's shared state: one schema, one broker, warmed
// publishers and connection pools.
type bench struct {
	o   options
	out io.Writer
	dsn string // with the schema's search_path

	db     *gorm.DB // with the hooks plugin
	plain  *gorm.DB // without it: the baselines' writers and the consumer
	sqlDB  *sql.DB  // pgx's database/sql driver: the baselines' relays
	plugin *hooks.Plugin
	ev     eventMaker

	cluster  *kafkatest.Cluster
	brokers  []string
	produced *produceCounter

	pubs     map[string]*kafka.Publisher
	relayDBs []*gorm.DB
	wmRuns   int

	// consumeRuns numbers the consumer section's runs (see consumeTopic).
	consumeRuns int

	// lastCPU is the CPU the last drain of our relay or the batched one
	// used (nil after the others).
	lastCPU *cpuUse

	// cdc reports whether the CDC paths run (wal_level = logical), and
	// cdcRuns numbers their slots (see cdcConfig).
	cdc     bool
	cdcRuns int
	started time.Time
}

func compare(ctx context.Context, o options, args []string, out io.Writer) error {
	b := &bench{o: o, out: out, pubs: map[string]*kafka.Publisher{}, started: time.Now()}
	var err error
	if b.ev, err = newEventMaker(o.payload); err != nil {
		return err
	}
	db, dsn, cleanup, err := openSchema(o.dsn)
	if err != nil {
		return err
	}
	defer cleanup()
	b.db, b.dsn = db, dsn
	defer b.close()
	if err := b.setup(ctx); err != nil {
		return err
	}

	fmt.Fprintf(out, "command: go run ./adapters/harness/relaybench%s\n", quoteArgs(args))
	var version string
	if err := b.plain.Raw(`SHOW server_version`).Scan(&version).Error; err != nil {
		return err
	}
	fmt.Fprintf(out, "started %s; %d CPUs, GOMAXPROCS %d, %s; load average %s\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), goruntime.NumCPU(), goruntime.GOMAXPROCS(0), goruntime.Version(), loadAverage())
	fmt.Fprintf(out, "PostgreSQL %s at %s (own schema); kfake in process, 1 broker, topic %s with 8 partitions (acknowledged, not stored)\n",
		version, redact(o.dsn), topic)
	fmt.Fprintf(out, "events: %s (%d B payload, %d aggregates); %d repetitions, interleaved; figures are medians [min – max]\n",
		Paid{}.EventKey().Type, o.payload, o.aggregates, o.reps)
	var why string
	if b.cdc, why = b.cdcAvailable(ctx); !b.cdc {
		fmt.Fprintf(out, "CDC relay paths left out: %s (ALTER SYSTEM SET wal_level = logical, then a restart)\n", why)
	}

	for _, loaded := range o.loads {
		if err := b.runSections(ctx, loaded); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nfinished %s; load average %s\n", time.Now().UTC().Format("15:04 MST"), loadAverage())
	return nil
}

// runSections runs the selected sections, under the burner's load when
// loaded.
func (b *bench) runSections(ctx context.Context, loaded bool) (err error) {
	o := b.o
	if loaded {
		stop, err := startLoad(ctx, o.dsn, o.load)
		if err != nil {
			return err
		}
		defer func() {
			rate, stopErr := stop()
			if err == nil && stopErr == nil {
				fmt.Fprintf(b.out, "\n(the load committed %s transactions/s while it ran)\n", groupDigits(rate))
			}
			err = errors.Join(err, stopErr)
		}()
		fmt.Fprintf(b.out, "\n## Loaded: %s\n", o.load)
	} else if len(o.loads) > 1 {
		fmt.Fprintf(b.out, "\n## Quiet: nothing added\n")
	}
	for _, s := range sections {
		if !o.only[s] {
			continue
		}
		var err error
		switch s {
		case "relay":
			err = b.relaySection(ctx)
		case "latency":
			err = b.latencySection(ctx)
		case "save":
			err = b.saveSection(ctx)
		case "consumer":
			err = b.consumerSection(ctx)
		case "idle":
			err = b.idleSection(ctx)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// setup creates the tables, the pools, the plugin and the broker.
func (b *bench) setup(ctx context.Context) error {
	var err error
	if b.plain, err = gorm.Open(postgres.Open(b.dsn), &gorm.Config{Logger: logger.Discard}); err != nil {
		return err
	}
	if b.sqlDB, err = sql.Open("pgx", b.dsn); err != nil {
		return err
	}
	// Keep the connections of 8 writers (database/sql keeps 2 idle ones by
	// default, and a new PostgreSQL connection costs a process fork).
	for _, db := range []*gorm.DB{b.db, b.plain} {
		s, err := db.DB()
		if err != nil {
			return err
		}
		s.SetMaxIdleConns(max(16, b.o.producers+4))
	}
	b.sqlDB.SetMaxIdleConns(16)
	if err := hooks.Migrate(ctx, b.db, ""); err != nil {
		return err
	}
	if err := b.db.AutoMigrate(&Account{}); err != nil {
		return err
	}
	for _, q := range plainOutboxDDL {
		if err := b.plain.Exec(q).Error; err != nil {
			return err
		}
	}
	if b.plugin, err = hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return topic }}); err != nil {
		return err
	}
	if err := b.db.Use(b.plugin); err != nil {
		return err
	}
	if b.cluster, err = kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 8}); err != nil {
		return err
	}
	b.brokers = b.cluster.Addrs()
	b.produced = discardProduce(b.cluster.Fake(), func(t string) bool { return t == topic || t == warmTopic })
	return nil
}

func (b *bench) close() {
	for _, p := range b.pubs {
		p.Close()
	}
	for _, db := range b.relayDBs {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	}
	if b.sqlDB != nil {
		b.sqlDB.Close()
	}
	if b.plain != nil {
		if s, err := b.plain.DB(); err == nil {
			s.Close()
		}
	}
	if b.cluster != nil {
		b.cluster.Close()
	}
}

// publisher returns the named path's publisher (adapters/kafka with its
// defaults), created and warmed up (connections, metadata) on first use, so
// each path, and each relay instance, has its own, as processes would.
func (b *bench) publisher(name string) (*kafka.Publisher, error) {
	if p, ok := b.pubs[name]; ok {
		return p, nil
	}
	p, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: b.brokers, AllowAutoTopicCreation: true})
	if err != nil {
		return nil, err
	}
	warm := message.NewMessage("warm-up", []byte("{}"))
	warm.Metadata.Set(runtime.MetadataAggregateID, "warm")
	if err := p.Publish(warmTopic, warm); err != nil {
		p.Close()
		return nil, fmt.Errorf("warm up %s: %w", name, err)
	}
	b.pubs[name] = p
	return p, nil
}

// relayDB returns the i-th relay instance's own connection pool.
func (b *bench) relayDB(i int) (*gorm.DB, error) {
	for len(b.relayDBs) <= i {
		db, err := gorm.Open(postgres.Open(b.dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, err
		}
		b.relayDBs = append(b.relayDBs, db)
	}
	return b.relayDBs[i], nil
}

func (b *bench) progress(format string, args ...any) {
	if b.o.verbose {
		fmt.Fprintf(os.Stderr, "relaybench: "+format+"\n", args...)
	}
}

// measured checks that a path put at least n events on the broker's bench
// topic since before, and reports duplicates.
func (b *bench) measured(label string, before int64, n int) error {
	got := b.produced.get(topic) - before
	if got < int64(n) {
		return fmt.Errorf("%s: the broker received %d of the %d events", label, got, n)
	}
	if got > int64(n) {
		fmt.Fprintf(b.out, "note: %s: the broker received %d events, %d more than once\n", label, got, got-int64(n))
	}
	return nil
}

// relaySection is section 1: drain a pre-filled outbox.
func (b *bench) relaySection(ctx context.Context) error {
	o := b.o
	batch := effectiveBatch(o.batch)
	type path struct {
		label string
		n     int
		run   func(ctx context.Context, rep int) (time.Duration, error)
	}
	var paths []path
	for _, k := range o.relays {
		paths = append(paths, path{oursLabel(k), o.events, func(ctx context.Context, rep int) (time.Duration, error) {
			return b.drainOurs(ctx, k, rep == 0 && k == 1, sqlstore.StoreConfig{})
		}})
	}
	for _, k := range o.relays {
		if k > 1 {
			paths = append(paths, path{sharingLabel(k), o.events, func(ctx context.Context, _ int) (time.Duration, error) {
				return b.drainOurs(ctx, k, false, sqlstore.StoreConfig{MaxActiveRelays: sqlstore.Shards})
			}})
		}
	}
	paths = append(paths, path{oursDeleteLabel, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
		return b.drainOurs(ctx, 1, false, sqlstore.StoreConfig{DeletePublished: true})
	}})
	if b.cdc {
		paths = append(paths,
			path{cdcTableLabel, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
				return b.drainCDC(ctx, pgcdc.Table, false)
			}},
			path{cdcDeleteLabel, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
				return b.drainCDC(ctx, pgcdc.Table, true)
			}},
			path{cdcMessagesLabel, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
				return b.drainCDC(ctx, pgcdc.Messages, false)
			}})
	}
	paths = append(paths,
		path{"naive loop (claim 100, per row: produce + UPDATE)", o.naive, func(ctx context.Context, _ int) (time.Duration, error) {
			if err := b.prefillPlain(ctx, o.naive); err != nil {
				return 0, err
			}
			return drainNaive(ctx, b.sqlDB, b.brokers)
		}},
		path{"Watermill forwarder, defaults (poll 1s)", o.naive, func(ctx context.Context, _ int) (time.Duration, error) {
			return b.drainWatermill(ctx, 0)
		}},
		path{"Watermill forwarder, poll 10ms", o.naive, func(ctx context.Context, _ int) (time.Duration, error) {
			return b.drainWatermill(ctx, 10*time.Millisecond)
		}},
		path{batchedLabel, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
			return b.drainBatched(ctx, false, 1)
		}},
		path{batched2Label, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
			return b.drainBatched(ctx, false, 2)
		}},
		path{batchedDeleteLabel, o.events, func(ctx context.Context, _ int) (time.Duration, error) {
			return b.drainBatched(ctx, true, 1)
		}},
	)
	res, serverCPU, selfCPU := newResults(), newResults(), newResults()
	for rep := range o.reps {
		// Each repetition starts one path further on, so that no path
		// always runs first, after the set-up or after the heaviest drain
		// (a 200,000-event run showed the first path's server CPU per
		// event 30 % above the same work run later in the repetition).
		for i := range paths {
			p := paths[(i+rep)%len(paths)]
			b.progress("relay rep %d: %s", rep+1, p.label)
			before := b.produced.get(topic)
			b.lastCPU = nil
			d, err := p.run(ctx, rep)
			if err != nil {
				return fmt.Errorf("%s: %w", p.label, err)
			}
			if err := b.measured(p.label, before, p.n); err != nil {
				return err
			}
			res.add(p.label, float64(p.n)/d.Seconds())
			if u := b.lastCPU; u != nil {
				per := float64(p.n) / 1000
				selfCPU.add(p.label, float64(u.self.Milliseconds())/per)
				if u.serverOK {
					serverCPU.add(p.label, float64(u.server.Milliseconds())/per)
				}
			}
		}
	}
	events := fmt.Sprintf("%s events", groupDigits(float64(o.events)))
	if o.naive != o.events {
		events += fmt.Sprintf(" (naive loop and forwarder: %s)", groupDigits(float64(o.naive)))
	}
	fmt.Fprintf(b.out, "\n### 1. Relay: drain a pre-filled outbox of %s, %d B each, %s aggregates; batch %s\n\n",
		events, o.payload, groupDigits(float64(o.aggregates)), groupDigits(float64(batch)))
	res.table(b.out, "events/s", groupDigits)
	cpu := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	if len(serverCPU.labels) > 0 {
		fmt.Fprintf(b.out, "\nCPU time of the PostgreSQL server's processes (from /proc) during each drain:\n\n")
		serverCPU.table(b.out, "server CPU, ms per 1,000 events", cpu)
	}
	fmt.Fprintf(b.out, "\nCPU time of this process (the relays, their publishers and the in-process broker) during each drain:\n\n")
	selfCPU.table(b.out, "process CPU, ms per 1,000 events", cpu)
	one := oursLabel(o.relays[0])
	ratios := []ratio{{"ours(1) / batched", one, batchedLabel}}
	for _, k := range o.relays[1:] {
		ratios = append(ratios, ratio{fmt.Sprintf("ours(%d) / ours(%d)", k, o.relays[0]), oursLabel(k), one})
	}
	for _, k := range o.relays[1:] {
		ratios = append(ratios, ratio{fmt.Sprintf("ours(%d), sharing / ours(%d)", k, o.relays[0]), sharingLabel(k), one})
	}
	if b.cdc {
		ratios = append(ratios,
			ratio{"CDC, Table mode / ours(1)", cdcTableLabel, one},
			ratio{"CDC, Messages mode / ours(1)", cdcMessagesLabel, one},
			ratio{"CDC, Table mode, DeletePublished / ours, DeletePublished", cdcDeleteLabel, oursDeleteLabel},
			ratio{"CDC, Table mode / batched", cdcTableLabel, batchedLabel})
	}
	ratios = append(ratios,
		ratio{"batched(2) / batched(1): what a second instance gives the reference on this machine", batched2Label, batchedLabel},
		ratio{"ours(1) / Watermill forwarder, defaults", one, "Watermill forwarder, defaults (poll 1s)"},
		ratio{"ours(1) / Watermill forwarder, poll 10ms", one, "Watermill forwarder, poll 10ms"},
		ratio{"ours(1) / batched DELETE", one, batchedDeleteLabel},
		ratio{"ours, 1 relay, DeletePublished / batched DELETE", oursDeleteLabel, batchedDeleteLabel},
		ratio{"ours, 1 relay, DeletePublished / ours(1)", oursDeleteLabel, one},
		ratio{"batched DELETE / batched", batchedDeleteLabel, batchedLabel},
		ratio{"ours(1) / naive loop", one, "naive loop (claim 100, per row: produce + UPDATE)"},
	)
	if o.relays[0] != 1 {
		for i := range ratios {
			ratios[i].label = strings.ReplaceAll(ratios[i].label, "ours(1)", fmt.Sprintf("ours(%d)", o.relays[0]))
		}
	}
	fmt.Fprintln(b.out)
	res.ratios(b.out, ratios)
	return nil
}

const (
	oursDeleteLabel    = "ours, 1 relay, StoreConfig.DeletePublished (the mark is a DELETE)"
	batchedLabel       = "batched relay (claim SKIP LOCKED, 1 write, UPDATE = ANY)"
	batched2Label      = "batched relay, 2 instances (SKIP LOCKED: no per-aggregate order)"
	batchedDeleteLabel = "batched relay, DELETE instead of UPDATE"
)

// oursLabel is the label of k relays with their defaults: for k > 1, one
// publishes and the others stand by.
func oursLabel(k int) string {
	if k == 1 {
		return "ours, 1 relay"
	}
	return fmt.Sprintf("ours, %d relays", k)
}

// sharingLabel is the label of k relays that all take a share.
func sharingLabel(k int) string {
	return fmt.Sprintf("ours, %d relays, all sharing (StoreConfig.MaxActiveRelays %d)", k, sqlstore.Shards)
}

func effectiveBatch(b int) int {
	if b == 0 {
		return relay.DefaultBatchSize
	}
	return b
}

// drainOurs pre-fills the outbox and drains it with k relays, each with its
// own pool, store and publisher.
func (b *bench) drainOurs(ctx context.Context, k int, profile bool, cfg sqlstore.StoreConfig) (time.Duration, error) {
	if err := prefill(ctx, b.db, b.plugin, b.ev, b.o.events, b.o.aggregates); err != nil {
		return 0, err
	}
	stores := make([]relay.Store, k)
	pubs := make([]message.Publisher, k)
	for i := range k {
		db, err := b.relayDB(i)
		if err != nil {
			return 0, err
		}
		s, err := newStoreWith(db, cfg)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		stores[i] = s
		if pubs[i], err = b.publisher(fmt.Sprintf("ours-%d", i)); err != nil {
			return 0, err
		}
	}
	if path := b.o.cpuprofile; path != "" && profile {
		f, err := os.Create(path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, err
		}
		defer pprof.StopCPUProfile()
	}
	m := startCPU(localURL(b.o.dsn))
	d, err := drainRelays(ctx, stores, pubs, b.o.batch, b.o.events)
	use := m.stop()
	b.lastCPU = &use
	return d, err
}

// drainBatched pre-fills bench_outbox and drains it with instances batched
// relays at once, each with its own publisher, sharing the pool. Two of
// them interleave an aggregate's rows (SKIP LOCKED hands each the rows the
// other has not locked), so they keep no per-aggregate order: they are a
// yardstick of what a second instance gives on this machine, not a relay
// one could run.
func (b *bench) drainBatched(ctx context.Context, del bool, instances int) (time.Duration, error) {
	if err := b.prefillPlain(ctx, b.o.events); err != nil {
		return 0, err
	}
	name := "batched"
	if del {
		name = "batched-delete"
	}
	relays := make([]*batchedRelay, instances)
	for i := range relays {
		pub, err := b.publisher(fmt.Sprintf("%s-%d", name, i))
		if err != nil {
			return 0, err
		}
		relays[i] = &batchedRelay{db: b.sqlDB, pub: pub, batch: effectiveBatch(b.o.batch), delete: del}
	}
	errc := make(chan error, instances)
	m := startCPU(localURL(b.o.dsn))
	start := time.Now()
	for _, r := range relays {
		go func() { errc <- r.run(ctx) }()
	}
	var err error
	for range relays {
		err = errors.Join(err, <-errc)
	}
	d := time.Since(start)
	use := m.stop()
	b.lastCPU = &use
	if err != nil {
		return 0, err
	}
	var sent int64
	for _, r := range relays {
		sent += r.sent.Load()
	}
	if sent != int64(b.o.events) {
		return 0, fmt.Errorf("batched relay relayed %d of %d rows", sent, b.o.events)
	}
	return d, nil
}

// drainWatermill pre-fills a forwarder topic and drains it with the
// forwarder, its subscriber polling every poll (0: its default).
func (b *bench) drainWatermill(ctx context.Context, poll time.Duration) (time.Duration, error) {
	n := b.o.naive
	fwdTopic, err := b.prefillWatermill(ctx, n)
	if err != nil {
		return 0, err
	}
	defer b.dropWatermill(ctx, fwdTopic)
	pub, err := b.publisher("watermill-" + strconv.FormatInt(int64(poll/time.Millisecond), 10))
	if err != nil {
		return 0, err
	}
	counted := newCountingPublisher(pub, n)
	start := time.Now()
	stop, err := b.startForwarder(ctx, fwdTopic, poll, counted)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	select {
	case <-counted.done:
		d = time.Since(start)
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(10 * time.Minute):
		err = fmt.Errorf("forwarder drain timed out: %d of %d published", counted.got.Load(), n)
	}
	if serr := stop(); err == nil && serr != nil {
		err = fmt.Errorf("forwarder: %w", serr)
	}
	return d, err
}

// results holds one value per repetition for each label, in order.
type results struct {
	labels []string
	vals   map[string][]float64
}

func newResults() *results { return &results{vals: map[string][]float64{}} }

func (r *results) add(label string, v float64) {
	if _, ok := r.vals[label]; !ok {
		r.labels = append(r.labels, label)
	}
	r.vals[label] = append(r.vals[label], v)
}

// table prints one row per label: median, min – max and every repetition.
func (r *results) table(out io.Writer, unit string, format func(float64) string) {
	fmt.Fprintf(out, "| path | %s, median | min – max | repetitions |\n|---|---:|---:|---|\n", unit)
	for _, l := range r.labels {
		med, lo, hi := spread(r.vals[l])
		reps := make([]string, len(r.vals[l]))
		for i, v := range r.vals[l] {
			reps[i] = format(v)
		}
		fmt.Fprintf(out, "| %s | %s | %s – %s | %s |\n", l, format(med), format(lo), format(hi), strings.Join(reps, ", "))
	}
}

// ratio is num's value over den's, per repetition.
type ratio struct{ label, num, den string }

// ratios prints each ratio's median and min – max over the repetitions.
func (r *results) ratios(out io.Writer, list []ratio) {
	fmt.Fprintf(out, "| ratio, per repetition | median | min – max |\n|---|---:|---:|\n")
	for _, q := range list {
		num, den := r.vals[q.num], r.vals[q.den]
		if len(num) == 0 || len(num) != len(den) {
			continue
		}
		per := make([]float64, len(num))
		for i := range num {
			per[i] = num[i] / den[i]
		}
		med, lo, hi := spread(per)
		fmt.Fprintf(out, "| %s | %s× | %s – %s× |\n", q.label, ratioDigits(med), ratioDigits(lo), ratioDigits(hi))
	}
}

// spread returns the median, minimum and maximum of vs.
func spread(vs []float64) (med, lo, hi float64) {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// groupDigits formats v rounded to an integer with thousands separators.
func groupDigits(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var g strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			g.WriteByte(',')
		}
		g.WriteRune(c)
	}
	if neg {
		return "-" + g.String()
	}
	return g.String()
}

func ratioDigits(v float64) string {
	if v >= 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// quoteArgs returns args as they would be typed in a shell, with a leading
// space when there are any.
func quoteArgs(args []string) string {
	var s strings.Builder
	for _, a := range args {
		s.WriteByte(' ')
		if u, err := url.Parse(a); err == nil && u.User != nil {
			a = u.Redacted()
		}
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == ',' || r == '/' || r == ':' || r == '=' ||
				(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
		}) < 0 {
			s.WriteString(a)
			continue
		}
		s.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return s.String()
}

// loadAverage returns the machine's 1, 5 and 15-minute load averages.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
