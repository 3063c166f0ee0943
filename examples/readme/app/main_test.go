package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/examples/internal/exampletest"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
)

var databases = []struct {
	name string
	open func(t *testing.T) *gorm.DB
}{
	{"sqlite", func(t *testing.T) *gorm.DB { return hookstest.SQLite(t, &gorm.Config{Logger: logger.Discard}) }},
	{"postgres", func(t *testing.T) *gorm.DB { return hookstest.Postgres(t, &gorm.Config{Logger: logger.Discard}) }},
}

// start runs the README's program in the background; the returned function
// stops it and reports what run returned.
func start(t *testing.T, db *gorm.DB, brokers []string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, db, brokers) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("run did not return within 30s of its context's cancellation")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// TestAppPublishesTheOrder runs the README's program on each database with an
// in-process Kafka and reads the topic back raw: the topic is the aggregate
// type in snake_case, the key the aggregate id.
func TestAppPublishesTheOrder(t *testing.T) {
	for _, tc := range databases {
		t.Run(tc.name, func(t *testing.T) {
			logs := exampletest.CaptureDefault(t, slog.LevelInfo)
			brokers := kafkatest.NewCluster(t)
			stop := start(t, tc.open(t), brokers)

			r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: "order", GroupID: "readme-app-test", MaxWait: 100 * time.Millisecond})
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			msg, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("read topic order: %v", err)
			}
			headers := map[string]string{}
			for _, h := range msg.Headers {
				headers[h.Key] = string(h.Value)
			}
			want := map[string]string{
				runtime.MetadataEventType:     "orders.order_placed",
				runtime.MetadataEventVersion:  "2",
				runtime.MetadataAggregateType: "order",
				runtime.MetadataAggregateID:   "1",
			}
			for k, v := range want {
				if headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, headers[k], v)
				}
			}
			if string(msg.Key) != "1" {
				t.Errorf("key = %q, want the aggregate id %q", msg.Key, "1")
			}
			var payload struct{ Total, Channel string }
			if err := json.Unmarshal(msg.Value, &payload); err != nil || payload.Total != "42.00" || payload.Channel != "web" {
				t.Errorf("payload %s (%v), want total 42.00 and channel web", msg.Value, err)
			}
			logs.WaitFor(t, time.Second, "level=INFO", `msg="order placed"`, "order_id=1")
			if err := stop(); err != nil {
				t.Errorf("run = %v, want nil after cancellation", err)
			}
		})
	}
}

// TestAppWithoutBrokerWarns: with no broker at the address, the program's
// default logger shows the failure within seconds, at WARN, one line per
// failed attempt. The program sets no relay logger: this relies on a nil
// relay.Config.Logger meaning slog.Default().
func TestAppWithoutBrokerWarns(t *testing.T) {
	logs := exampletest.CaptureDefault(t, slog.LevelInfo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	start(t, hookstest.SQLite(t, &gorm.Config{Logger: logger.Discard}), []string{addr})

	begin := time.Now()
	line := logs.WaitFor(t, 10*time.Second, "level=WARN", "publish failed")
	t.Logf("first WARN after %v: %s", time.Since(begin).Round(time.Millisecond), line)
	if !strings.Contains(line, "connection refused") {
		t.Errorf("WARN line does not name the broker error: %s", line)
	}
	if n := strings.Count(line, "\n"); n != 1 || strings.Contains(line, `\n`) {
		t.Errorf("WARN record spans %d lines or embeds line breaks (a stack trace?): %q", n, line)
	}
}
