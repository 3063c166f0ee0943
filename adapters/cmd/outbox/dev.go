package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// devCommand is "outbox dev": the in-process Kafka the quickstart uses
// (package adapters/kafka/kafkatest), run on its own for local development.
func devCommand() *command {
	c := &command{
		name: "dev", args: "[--port 9092] [--partitions 4] [--data dir]",
		summary: "run an in-process Kafka for local development and print its address",
		help: `Runs an in-process, Kafka-protocol broker (franz-go's kfake, as the
quickstart does: package adapters/kafka/kafkatest) on 127.0.0.1:--port until
SIGINT or SIGTERM, and prints its broker URL for outbox relay --broker and
its address for kafka-go or any Kafka client. It creates any topic a client
asks for, with --partitions partitions. With --data, it keeps topics,
records and consumer offsets in that directory across runs; without, in
memory. For development and demos only: one process, no replication, and
no durability guarantee.`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlagSet(e, c)
		var port, partitions int
		fs.countVar(&port, "port", 1, 65535, "ports", "the default, 9092", "listen on 127.0.0.1:`port` (default: 9092)")
		fs.countVar(&partitions, "partitions", 1, 10000, "partitions", "the default, 4", "partitions of each topic created (default: 4)")
		dataDir := fs.String("data", "", "keep the data in this `directory` across runs (default: in memory)")
		pos, err := fs.parse(args)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usagef("dev takes flags, no arguments (got %q)", pos)
		}
		if port == 0 {
			port = 9092
		}
		cl, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: partitions, DataDir: *dataDir,
			Options: []kfake.Opt{kfake.Ports(port)}})
		if err != nil {
			return fmt.Errorf("dev: %w (is another broker listening on port %d? give --port)", err, port)
		}
		defer cl.Close()
		addrs := cl.Addrs()
		brokerURL := "kafka://" + strings.Join(addrs, ",")
		if fs.json {
			out, _ := json.Marshal(map[string]any{"brokers": addrs, "broker_url": brokerURL})
			fmt.Fprintln(e.stdout, string(out))
		} else {
			fmt.Fprintf(e.stdout, "Kafka (in-process, kfake) listening on %s\n", strings.Join(addrs, ","))
			fmt.Fprintf(e.stdout, "  relay:   outbox relay --db ... --broker %s\n", brokerURL)
			fmt.Fprintf(e.stdout, "  clients: KAFKA_BROKERS=%s\n", strings.Join(addrs, ","))
			fmt.Fprintln(e.stdout, "Stop it with Ctrl-C.")
		}
		<-e.ctx.Done()
		return nil
	}
	return c
}
