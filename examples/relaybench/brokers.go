package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
)

// brokerRun drains the same pre-filled outbox (o.events rows) through each
// broker of o.brokerURLs in turn, o.reps times interleaved, and prints
// events/s per broker with the median. kafka://kfake starts an in-process
// kfake broker (one node, the topic with 8 partitions).
func brokerRun(ctx context.Context, o options, out io.Writer) error {
	ev, err := newEventMaker(o.payload)
	if err != nil {
		return err
	}
	db, _, cleanup, err := openSchema(o.dsn)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return err
	}
	plugin, err := hooks.New(hooks.Config{Topic: func(runtime.Envelope) string { return topic }})
	if err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}
	store, err := newStore(db)
	if err != nil {
		return err
	}
	defer store.Close()
	urls := strings.Split(o.brokerURLs, ",")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opened := make([]*broker.Broker, len(urls))
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
		b, err := broker.Open(ctx, u, broker.Config{Logger: quiet})
		if err != nil {
			return err
		}
		defer b.Close()
		opened[i] = b
	}
	rates := make([][]float64, len(urls))
	for rep := range o.reps {
		for i, b := range opened {
			if err := prefill(ctx, db, plugin, ev, o.events, o.aggregates); err != nil {
				return err
			}
			r, err := drainRelay(ctx, store, b.Publisher(), o)
			if err != nil {
				return fmt.Errorf("%s: %w", urls[i], err)
			}
			rates[i] = append(rates[i], r)
			fmt.Fprintf(out, "rep %d  %-10s %8.0f events/s\n", rep+1, b.Scheme(), r)
		}
	}
	fmt.Fprintf(out, "\nrelay drain of %d pre-filled events (%d aggregates), median of %d:\n", o.events, o.aggregates, o.reps)
	for i, b := range opened {
		s := slices.Clone(rates[i])
		slices.Sort(s)
		fmt.Fprintf(out, "  %-10s %8.0f events/s  (min %.0f, max %.0f)\n", b.Scheme(), s[len(s)/2], s[0], s[len(s)-1])
	}
	return nil
}
