package kafkatest_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

func TestNewClusterFromEnv(t *testing.T) {
	t.Setenv(kafkatest.EnvBrokers, " 127.0.0.1:19092, ,127.0.0.1:19093 ")
	got := kafkatest.NewCluster(t)
	want := []string{"127.0.0.1:19092", "127.0.0.1:19093"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewCluster with %s set (-want +got):\n%s", kafkatest.EnvBrokers, diff)
	}
}

func TestNewClusterInProcess(t *testing.T) {
	t.Setenv(kafkatest.EnvBrokers, "")
	brokers := kafkatest.NewCluster(t)
	if len(brokers) != 3 {
		t.Fatalf("NewCluster returned %d brokers, want 3", len(brokers))
	}
	// A producer may create topics; they get the default partition count.
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), AllowAutoTopicCreation: true, BatchTimeout: 1}
	defer w.Close()
	if err := w.WriteMessages(context.Background(), kafkago.Message{Topic: "auto", Value: []byte("x")}); err != nil {
		t.Fatalf("WriteMessages to a new topic: %v", err)
	}
	conn, err := kafkago.Dial("tcp", brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions("auto")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 4 {
		t.Errorf("auto-created topic has %d partitions, want 4", len(parts))
	}
}

func TestStartConfig(t *testing.T) {
	c, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := len(c.Addrs()); got != 1 {
		t.Errorf("Start with Brokers 1: %d addresses, want 1", got)
	}
	if c.Fake() == nil {
		t.Error("Fake() = nil")
	}
	c.Close() // a second Close is harmless

	if _, err := kafkatest.Start(kafkatest.Config{Brokers: -1}); err == nil {
		t.Error("Start with -1 brokers = nil error, want one")
	}
}

func TestRestartKeepsData(t *testing.T) {
	c, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs := c.Addrs()
	w := &kafkago.Writer{Addr: kafkago.TCP(addrs...), AllowAutoTopicCreation: true, BatchTimeout: 1}
	if err := w.WriteMessages(context.Background(), kafkago.Message{Topic: "kept", Value: []byte("before")}); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}
	w.Close()
	// kfake (this version) loses a record acknowledged a few milliseconds
	// before a shutdown: restarted at once, the partition comes back empty
	// (offsets 0..0) although the segment file holds the record; 200ms later
	// it comes back whole. The cause is in kfake's reload and is not found
	// yet; see Cluster.Restart.
	time.Sleep(200 * time.Millisecond)

	if err := c.Restart(0); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if diff := cmp.Diff(addrs, c.Addrs()); diff != "" {
		t.Errorf("addresses changed across Restart (-before +after):\n%s", diff)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	leader, err := kafkago.DialLeader(ctx, "tcp", c.Addrs()[0], "kept", 0)
	if err != nil {
		t.Fatalf("DialLeader after Restart: %v", err)
	}
	defer leader.Close()
	if err := leader.SetReadDeadline(time.Now().Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	batch := leader.ReadBatch(1, 1e6)
	msg, err := batch.ReadMessage()
	if err != nil {
		t.Fatalf("ReadMessage after Restart: %v", err)
	}
	if err := batch.Close(); err != nil {
		t.Fatalf("batch.Close: %v", err)
	}
	if got := string(msg.Value); got != "before" {
		t.Errorf("after Restart read %q, want %q", got, "before")
	}
}
