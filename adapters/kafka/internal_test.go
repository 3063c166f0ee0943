package kafka

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/runtime"
)

// TestNewPublisherWriter checks the settings of the built kafka-go Writer
// that the outbox's guarantees rest on.
func TestNewPublisherWriter(t *testing.T) {
	p, err := NewPublisher(PublisherConfig{Brokers: []string{"127.0.0.1:9092"}})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	w := p.writer
	if w.RequiredAcks != kafka.RequireAll {
		t.Errorf("RequiredAcks = %v, want RequireAll", w.RequiredAcks)
	}
	if _, ok := w.Balancer.(*kafka.Hash); !ok {
		t.Errorf("Balancer = %T, want *kafka.Hash", w.Balancer)
	}
	if w.Async {
		t.Error("Async = true, want false")
	}
	if w.Topic != "" {
		t.Errorf("Topic = %q, want empty (set per message)", w.Topic)
	}
	if w.BatchSize != 1000 || w.BatchTimeout != 200*time.Microsecond || w.BatchBytes != 1<<20 {
		t.Errorf("BatchSize, BatchTimeout, BatchBytes = %d, %s, %d; want 1000, 200µs, %d", w.BatchSize, w.BatchTimeout, w.BatchBytes, 1<<20)
	}
	if w.AllowAutoTopicCreation {
		t.Error("AllowAutoTopicCreation = true, want false by default")
	}
	if got := w.Addr.String(); got != "127.0.0.1:9092" {
		t.Errorf("Addr = %q, want 127.0.0.1:9092", got)
	}
}

func TestOverwriteWriter(t *testing.T) {
	tests := []struct {
		name    string
		fn      func(*kafka.Writer)
		wantErr bool
	}{
		{"transport and attempts", func(w *kafka.Writer) { w.MaxAttempts = 3; w.Transport = &kafka.Transport{ClientID: "relay"} }, false},
		{"murmur2 balancer", func(w *kafka.Writer) { w.Balancer = &kafka.Murmur2Balancer{} }, false},
		{"async", func(w *kafka.Writer) { w.Async = true }, true},
		{"topic", func(w *kafka.Writer) { w.Topic = "fixed" }, true},
		{"nil balancer", func(w *kafka.Writer) { w.Balancer = nil }, true},
		{"nil addr", func(w *kafka.Writer) { w.Addr = nil }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPublisher(PublisherConfig{Brokers: []string{"127.0.0.1:9092"}, OverwriteWriter: tt.fn})
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("NewPublisher = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			p.Close()
		})
	}
}

// TestNewSubscriberReader checks the kafka-go reader settings, with the
// defaults and with the escape hatch.
func TestNewSubscriberReader(t *testing.T) {
	s, err := NewSubscriber(SubscriberConfig{
		Brokers:       []string{"127.0.0.1:9092"},
		ConsumerGroup: "billing",
		OverwriteReaderConfig: func(rc *kafka.ReaderConfig) {
			rc.QueueCapacity = 7
			rc.GroupID = "ignored"
			rc.Topic = "ignored"
		},
	})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer s.Close()
	rc := s.readerConfig("orders")
	type settings struct {
		GroupID, Topic                                     string
		StartOffset                                        int64
		MinBytes, MaxBytes, QueueCapacity                  int
		MaxWait, Heartbeat, Session, Rebalance, CommitIval time.Duration
	}
	got := settings{rc.GroupID, rc.Topic, rc.StartOffset, rc.MinBytes, rc.MaxBytes, rc.QueueCapacity,
		rc.MaxWait, rc.HeartbeatInterval, rc.SessionTimeout, rc.RebalanceTimeout, rc.CommitInterval}
	want := settings{"billing", "orders", kafka.FirstOffset, 1, 1e6, 7,
		time.Second, 3 * time.Second, 30 * time.Second, 30 * time.Second, 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reader config (-want +got):\n%s", diff)
	}
}

func TestToRecord(t *testing.T) {
	msg := message.NewMessage("0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b", []byte("{}"))
	msg.Metadata.Set("b", "2")
	msg.Metadata.Set("a", "1")
	msg.Metadata.Set(runtime.MetadataAggregateID, "order-1")
	key, err := AggregateIDKey("orders", msg)
	if err != nil {
		t.Fatal(err)
	}
	got := toRecord("orders", msg, key)
	want := kafka.Message{
		Topic: "orders",
		Key:   []byte("order-1"),
		Value: []byte("{}"),
		Headers: []kafka.Header{
			{Key: "a", Value: []byte("1")},
			{Key: runtime.MetadataAggregateID, Value: []byte("order-1")},
			{Key: "b", Value: []byte("2")},
			{Key: runtime.MetadataEventID, Value: []byte(msg.UUID)},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("toRecord (-want +got):\n%s", diff)
	}

	back := fromRecord(got)
	if back.UUID != msg.UUID {
		t.Errorf("fromRecord UUID = %q, want %q", back.UUID, msg.UUID)
	}

	// An empty event_id in the metadata is replaced by the UUID, not sent
	// next to it.
	msg.Metadata.Set(runtime.MetadataEventID, "")
	if back := fromRecord(toRecord("orders", msg, nil)); back.UUID != msg.UUID {
		t.Errorf("with an empty event_id metadata: fromRecord UUID = %q, want %q", back.UUID, msg.UUID)
	}
}
