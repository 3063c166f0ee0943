package kafkatest_test

import (
	"context"
	"testing"

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
