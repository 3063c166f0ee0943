package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// The suite re-executes its own binary (the program, or the test binary)
// for the processes it kills and pauses: envRole selects the role and
// envChild carries its childConfig as JSON.
const (
	envRole  = "OUTBOX_CORRECTNESS_ROLE"
	envChild = "OUTBOX_CORRECTNESS_CHILD"
	// envLogLevel sets the children's log level (debug, info, warn or
	// error; info when unset), for replaying a failed seed with the
	// relays' every batch in their logs.
	envLogLevel = "OUTBOX_CORRECTNESS_LOG_LEVEL"
)

// Roles a child process can take.
const (
	roleBroker   = "broker"
	roleRelay    = "relay"
	roleConsumer = "consumer"
)

// Kinds of relay (-relay).
const (
	// relayPoll is the polling relay: sqlstore.Store, leases on shards.
	relayPoll = "poll"
	// relayCDC is the CDC relay: pgcdc.Store in Table mode, one
	// replication slot streamed by one relay while the others stand by.
	relayCDC = "cdc"
)

// topic is the one topic every event goes to: the aggregate type of
// Account and of the enqueued events.
const topic = aggregateType

// childConfig is what a child process needs to know.
type childConfig struct {
	// Name identifies the process in its logs ("relay-2").
	Name string
	// DB is the relays' database, a -db value: "postgres" or "mysql".
	DB string
	// DSN is the role's database: for the relays the outbox's (DB), for
	// the consumer the PostgreSQL schema of its inbox and apply log. The
	// relays' DSN goes through the driving process's fault proxy and, on
	// PostgreSQL, names them with an application_name of their own.
	DSN string
	// Brokers are the Kafka brokers' addresses.
	Brokers []string
	// BrokerPort and ControlAddr are where the broker role listens: the
	// Kafka port and the loopback HTTP control channel.
	BrokerPort  int
	ControlAddr string
	// Partitions is the topic's partition count.
	Partitions int
	// MaxMessageBytes is the broker's message.max.bytes.
	MaxMessageBytes int
	// BatchSize is the relay's batch size.
	BatchSize int
	// MaxAttempts is sqlstore.StoreConfig.MaxAttempts for the relays.
	MaxAttempts int
	// MaxActiveRelays is sqlstore.StoreConfig.MaxActiveRelays for the
	// relays.
	MaxActiveRelays int
	// WriteTimeout is the relays' kafka-go write and read timeout.
	WriteTimeout time.Duration
	// StoreTimeout is the relays' relay.Config.StoreTimeout.
	StoreTimeout time.Duration
	// Relay is the relays' kind, a -relay value: relayPoll or relayCDC.
	Relay string
	// Slot is the CDC relays' replication slot (-relay cdc).
	Slot string
	// BrokerVia, when set, is where a relay's Kafka connections go: its
	// own fault proxy in the driving process, for every connection,
	// whatever address the broker's metadata names (one broker).
	BrokerVia string
}

// roleFromEnv reports the role this process was started in, "" for the
// driving process.
func roleFromEnv() string { return os.Getenv(envRole) }

// runRole runs the role named by the environment until SIGTERM or SIGINT
// (or a SIGKILL from the driver) and returns the process's exit code.
func runRole(role string, stderr io.Writer) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(envChild)), &cfg); err != nil {
		fmt.Fprintf(stderr, "correctness %s: bad %s: %v\n", role, envChild, err)
		return 2
	}
	var level slog.Level // info
	if s := os.Getenv(envLogLevel); s != "" {
		if err := level.UnmarshalText([]byte(s)); err != nil {
			fmt.Fprintf(stderr, "correctness %s: bad %s: %v\n", role, envLogLevel, err)
			return 2
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("proc", cfg.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch role {
	case roleBroker:
		err = runBroker(ctx, cfg, log)
	case roleRelay:
		err = runRelay(ctx, cfg, log)
	case roleConsumer:
		err = runConsumer(ctx, cfg, log)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		log.Error("role failed", "role", role, "error", err)
		return 1
	}
	log.Info("role stopped", "role", role)
	return 0
}
