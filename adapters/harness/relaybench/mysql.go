package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// mysqlRun is the MySQL/MariaDB mode (-mysql-url): the relay section's
// scale-out on MySQL or MariaDB. In a database of its own on the server, it
// pre-fills o.events events through the GORM plugin and drains them with
// our relay, one instance with its defaults and each count of o.relays
// above one all sharing the outbox (StoreConfig.MaxActiveRelays 64), each
// relay with its own connection pool, store and publisher, through an
// in-process kfake broker that acknowledges without storing; o.reps times
// interleaved. It prints events/s and the ratios to one relay.
func mysqlRun(ctx context.Context, o options, out io.Writer) error {
	ev, err := newEventMaker(o.payload)
	if err != nil {
		return err
	}
	db, dsn, cleanup, err := openMySQLDatabase(o.mysqlURL)
	if err != nil {
		return err
	}
	defer cleanup()
	plugin, err := withPlugin(ctx, db, topic)
	if err != nil {
		return err
	}
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 8})
	if err != nil {
		return err
	}
	defer cluster.Close()
	discardProduce(cluster.Fake(), func(t string) bool { return t == topic || t == warmTopic })

	// One relay, then each count above one, once and in order (-relays
	// need not be sorted).
	counts := append([]int{1}, o.relays...)
	slices.Sort(counts)
	counts = slices.Compact(counts)
	most := counts[len(counts)-1]
	var pools []*gorm.DB
	var pubs []message.Publisher
	defer func() {
		for _, p := range pubs {
			p.Close()
		}
		for _, p := range pools {
			if s, err := p.DB(); err == nil {
				s.Close()
			}
		}
	}()
	for i := range most {
		p, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return err
		}
		pools = append(pools, p)
		pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: cluster.Addrs(), AllowAutoTopicCreation: true})
		if err != nil {
			return err
		}
		pubs = append(pubs, pub)
		warm := message.NewMessage("warm-up", []byte("{}"))
		warm.Metadata.Set(runtime.MetadataAggregateID, "warm")
		if err := pub.Publish(warmTopic, warm); err != nil {
			return fmt.Errorf("warm up publisher %d: %w", i, err)
		}
	}
	var version string
	if err := db.Raw(`SELECT VERSION()`).Scan(&version).Error; err != nil {
		return err
	}
	fmt.Fprintf(out, "relaybench: MySQL/MariaDB mode: %s, %d events of %d B over %d aggregates, drained by our relay (1 with defaults; %v sharing, StoreConfig.MaxActiveRelays %d), in-process kfake broker, %d repetitions interleaved\n\n",
		version, o.events, o.payload, o.aggregates, counts[1:], sqlstore.Shards, o.reps)
	res := newResults()
	for rep := range o.reps {
		for _, k := range counts {
			label, cfg := oursLabel(1), sqlstore.StoreConfig{}
			if k > 1 {
				label, cfg = sharingLabel(k), sqlstore.StoreConfig{MaxActiveRelays: sqlstore.Shards}
			}
			if err := fill(ctx, db, plugin, ev, o.events, o.aggregates); err != nil {
				return err
			}
			if err := db.Exec(`ANALYZE TABLE ` + sqlstore.DefaultTable).Error; err != nil {
				return err
			}
			d, err := drainStores(ctx, pools[:k], pubs[:k], cfg, o.batch, o.events)
			if err != nil {
				return fmt.Errorf("%s, repetition %d: %w", label, rep+1, err)
			}
			res.add(label, float64(o.events)/d.Seconds())
			if o.verbose {
				fmt.Fprintf(out, "  rep %d: %s: %.0f events/s\n", rep+1, label, float64(o.events)/d.Seconds())
			}
		}
	}
	res.table(out, "events/s", groupDigits)
	fmt.Fprintln(out)
	var ratios []ratio
	for _, k := range counts[1:] {
		ratios = append(ratios, ratio{fmt.Sprintf("ours(%d), sharing / ours(1)", k), sharingLabel(k), oursLabel(1)})
	}
	res.ratios(out, ratios)
	return nil
}

// drainStores opens a store with cfg on each pool and drains n events with
// one relay per store (see drainRelays).
func drainStores(ctx context.Context, pools []*gorm.DB, pubs []message.Publisher, cfg sqlstore.StoreConfig, batch, n int) (time.Duration, error) {
	stores := make([]relay.Store, len(pools))
	for i, p := range pools {
		s, err := newStoreWith(p, cfg)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		stores[i] = s
	}
	return drainRelays(ctx, stores, pubs, batch, n)
}

// openMySQLDatabase creates a database of its own on dsn's server and
// returns a GORM database on it, its DSN, and the function that drops it.
func openMySQLDatabase(dsn string) (*gorm.DB, string, func(), error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, "", nil, fmt.Errorf("-mysql-url: %w", err)
	}
	cfg.ParseTime = true
	admin, err := gorm.Open(mysql.Open(cfg.FormatDSN()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, "", nil, err
	}
	closeAdmin := func() {
		if s, err := admin.DB(); err == nil {
			s.Close()
		}
	}
	name := fmt.Sprintf("relaybench_%d", time.Now().UnixNano())
	if err := admin.Exec(`CREATE DATABASE ` + name).Error; err != nil {
		closeAdmin()
		return nil, "", nil, fmt.Errorf("create database: %w", err)
	}
	cfg.DBName = name
	own := cfg.FormatDSN()
	db, err := gorm.Open(mysql.Open(own), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		admin.Exec(`DROP DATABASE ` + name)
		closeAdmin()
		return nil, "", nil, err
	}
	return db, own, func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
		admin.Exec(`DROP DATABASE ` + name)
		closeAdmin()
	}, nil
}
