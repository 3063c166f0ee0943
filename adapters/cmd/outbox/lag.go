package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/gooutbox/outbox/adapters/broker"
)

// ---- lag ----

// openLagBroker opens the broker whose consumer lag `outbox lag` reads.
func openLagBroker(ctx context.Context, url string, log *slog.Logger) (*broker.Broker, error) {
	return broker.Open(ctx, url, broker.Config{Logger: log})
}

func lagCommand() *command {
	c := &command{
		name: "lag", args: "--broker <url> --group <name> [--topic T[,T...]]",
		summary: "show a consumer group's lag per partition",
		help: `Shows how far a consumer group (a consumer's Config.Name, as its subscriber's
group) is behind on each partition: its committed offset, the partition's
end and the difference, with the total. Without --topic, every topic the
group committed offsets on; a partition the group never committed on shows
committed -1 and its whole length as lag.

The broker is read, not joined: the group's members are not disturbed.
Kafka (kafka://) reports lag; another broker's adapter says it cannot.

With --fail-if-lag-above N, it exits with status 3 when the total lag is
more than N (for a cron job or a readiness check).`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		brokerURL := fs.String("broker", e.getenv("OUTBOX_BROKER_URL"), "broker `URL` (default: $OUTBOX_BROKER_URL)")
		group := fs.String("group", "", "the consumer `group` (the consumer's Config.Name)")
		topicList := fs.String("topic", "", "only these `topics` (comma-separated)")
		failAbove := fs.Int64("fail-if-lag-above", -1, "exit 3 if the total lag is more than `N` messages")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		switch {
		case len(pos) > 0:
			return usagef("lag takes no arguments")
		case *brokerURL == "":
			return usagef("lag needs --broker URL (or $OUTBOX_BROKER_URL)")
		case *group == "":
			return usagef("lag needs --group: the consumer group (the consumer's Config.Name)")
		case *failAbove < -1:
			return &flagError{Flag: "--fail-if-lag-above", Value: strconv.FormatInt(*failAbove, 10), Want: "a count, 0 or more"}
		}
		if err := checkBrokerURL(*brokerURL); err != nil {
			return err
		}
		var topics []string
		for _, t := range strings.Split(*topicList, ",") {
			if t = strings.TrimSpace(t); t != "" {
				topics = append(topics, t)
			}
		}
		log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		b, err := e.openLag(e.ctx, *brokerURL, log)
		if err != nil {
			return brokerFlagError(*brokerURL, err)
		}
		defer b.Close()
		lag, err := b.Lag(e.ctx, *group, topics...)
		if errors.Is(err, broker.ErrLagUnsupported) {
			return &flagError{Flag: "--broker", Value: *brokerURL, Want: "a broker whose adapter reports consumer lag (kafka://)"}
		}
		if err != nil {
			return err
		}
		var total int64
		for _, l := range lag {
			total += l.Lag
		}
		if fs.json {
			type row struct {
				Topic     string `json:"topic"`
				Partition int    `json:"partition"`
				Committed int64  `json:"committed"`
				End       int64  `json:"end"`
				Lag       int64  `json:"lag"`
			}
			rows := make([]row, len(lag))
			for i, l := range lag {
				rows[i] = row{l.Topic, l.Partition, l.Committed, l.End, l.Lag}
			}
			if err := writeJSON(e.stdout, map[string]any{"group": *group, "partitions": rows, "total": total}); err != nil {
				return err
			}
		} else {
			t := newTable(e.stdout, "TOPIC", "PARTITION", "COMMITTED", "END", "LAG")
			for _, l := range lag {
				t.row(l.Topic, strconv.Itoa(l.Partition), itoa(l.Committed), itoa(l.End), itoa(l.Lag))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(lag) == 0 {
				fmt.Fprintf(e.stdout, "group %s has committed no offsets (name its topics with --topic)\n", *group)
			} else {
				fmt.Fprintf(e.stdout, "total lag of group %s: %d\n", *group, total)
			}
		}
		if *failAbove >= 0 && total > *failAbove {
			return alertError{fmt.Sprintf("group %s lags %d messages behind, more than %d", *group, total, *failAbove)}
		}
		return nil
	}
	return c
}
