package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// brokerRun drains the same pre-filled outbox (o.events rows) through each
// broker of o.brokerURLs in turn, with each count of relays of o.relays
// (more than one: all sharing the outbox, each with its own pool, store and
// publisher), o.reps times interleaved, and prints events/s per broker and
// count with the median. kafka://kfake starts an in-process kfake broker
// (one node, the topic with 8 partitions).
func brokerRun(ctx context.Context, o options, out io.Writer) error {
	ev, err := newEventMaker(o.payload)
	if err != nil {
		return err
	}
	db, dsn, cleanup, err := openSchema(o.dsn)
	if err != nil {
		return err
	}
	defer cleanup()
	plugin, err := withPlugin(ctx, db, topic)
	if err != nil {
		return err
	}
	urls := strings.Split(o.brokerURLs, ",")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Each relay gets a broker client of its own, as a process would.
	most := slices.Max(o.relays)
	opened := make([][]*broker.Broker, len(urls))
	for i, u := range urls {
		u = strings.TrimSpace(u)
		if u == "kafka://kfake" {
			cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 8})
			if err != nil {
				return err
			}
			defer cluster.Close()
			sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: cluster.Addrs(), ConsumerGroup: "relaybench", TopicPartitions: 8})
			if err != nil {
				return err
			}
			if err := sub.SubscribeInitialize(topic); err != nil {
				return err
			}
			sub.Close()
			u = "kafka://" + strings.Join(cluster.Addrs(), ",")
		}
		if u == "sqs://sqstest" {
			srv, err := sqstest.Start()
			if err != nil {
				return err
			}
			defer srv.Close()
			u = "sqs://" + strings.TrimPrefix(srv.URL(), "http://") + "?create=1"
		}
		for range most {
			b, err := broker.Open(ctx, u, broker.Config{Logger: quiet})
			if err != nil {
				return err
			}
			defer b.Close()
			opened[i] = append(opened[i], b)
		}
	}
	// One pool and store per relay.
	stores := make([]relay.Store, most)
	for i := range stores {
		rdb, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return err
		}
		if sdb, err := rdb.DB(); err == nil {
			defer sdb.Close()
		}
		s, err := newStoreWith(rdb, sqlstore.StoreConfig{MaxActiveRelays: sqlstore.Shards})
		if err != nil {
			return err
		}
		defer s.Close()
		stores[i] = s
	}
	type run struct {
		broker int
		relays int
	}
	rates := map[run][]float64{}
	for rep := range o.reps {
		for i, bs := range opened {
			for _, k := range o.relays {
				if err := prefill(ctx, db, plugin, ev, o.events, o.aggregates); err != nil {
					return err
				}
				pubs := make([]message.Publisher, k)
				for j := range pubs {
					pubs[j] = bs[j].Publisher()
				}
				d, err := drainRelays(ctx, stores[:k], pubs, o.batch, o.events)
				if err != nil {
					return fmt.Errorf("%s, %d relays: %w", urls[i], k, err)
				}
				r := float64(o.events) / d.Seconds()
				rates[run{i, k}] = append(rates[run{i, k}], r)
				fmt.Fprintf(out, "rep %d  %-10s %d relays %8.0f events/s\n", rep+1, bs[0].Scheme(), k, r)
			}
		}
	}
	fmt.Fprintf(out, "\nrelay drain of %d pre-filled events (%d aggregates), median of %d:\n", o.events, o.aggregates, o.reps)
	for i, bs := range opened {
		for _, k := range o.relays {
			s := slices.Clone(rates[run{i, k}])
			slices.Sort(s)
			ratio := ""
			if k != o.relays[0] {
				base := rates[run{i, o.relays[0]}]
				per := make([]float64, len(base))
				for j := range base {
					per[j] = rates[run{i, k}][j] / base[j]
				}
				slices.Sort(per)
				ratio = fmt.Sprintf("  %.2fx of %d (per repetition: %.2f – %.2f)", per[len(per)/2], o.relays[0], per[0], per[len(per)-1])
			}
			fmt.Fprintf(out, "  %-10s %d relays %8.0f events/s  (min %.0f, max %.0f)%s\n", bs[0].Scheme(), k, s[len(s)/2], s[0], s[len(s)-1], ratio)
		}
	}
	return nil
}
