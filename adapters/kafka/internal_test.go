package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
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
	w := p.set.Load().writers[len(p.set.Load().writers)-1]
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
		{"negative batch size", func(w *kafka.Writer) { w.BatchSize = -1 }, true},
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

// TestWriterSizes checks which writer serves a Publish call of each size:
// the smallest whose BatchSize holds the call's records, so that each
// partition's records of a call go in one produce request while kafka-go
// preallocates no more record slots than the call can use.
func TestWriterSizes(t *testing.T) {
	tests := []struct {
		name      string
		cfg       PublisherConfig
		wantSizes []int       // the writers' BatchSize, smallest first
		calls     map[int]int // records in a call → BatchSize of its writer
	}{
		{"default", PublisherConfig{}, []int{16, 128, 1000},
			map[int]int{1: 16, 16: 16, 17: 128, 128: 128, 129: 1000, 1000: 1000, 5000: 1000}},
		{"BatchSize 50", PublisherConfig{BatchSize: 50}, []int{16, 50},
			map[int]int{1: 16, 16: 16, 17: 50, 50: 50, 51: 50}},
		{"BatchSize 16", PublisherConfig{BatchSize: 16}, []int{16},
			map[int]int{1: 16, 17: 16}},
		{"BatchSize 10", PublisherConfig{BatchSize: 10}, []int{10},
			map[int]int{1: 10, 11: 10}},
		{"OverwriteWriter sets 200", PublisherConfig{OverwriteWriter: func(w *kafka.Writer) { w.BatchSize = 200 }}, []int{16, 128, 200},
			map[int]int{128: 128, 129: 200, 201: 200}},
		{"OverwriteWriter sets 0 (kafka-go's 100)", PublisherConfig{OverwriteWriter: func(w *kafka.Writer) { w.BatchSize = 0 }}, []int{16, 0},
			map[int]int{16: 16, 17: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Brokers = []string{"127.0.0.1:9092"}
			calls := 0
			if fn := tt.cfg.OverwriteWriter; fn != nil {
				tt.cfg.OverwriteWriter = func(w *kafka.Writer) { calls++; fn(w) }
			}
			p, err := NewPublisher(tt.cfg)
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			defer p.Close()
			var sizes []int
			for _, w := range p.set.Load().writers {
				sizes = append(sizes, w.BatchSize)
			}
			if diff := cmp.Diff(tt.wantSizes, sizes); diff != "" {
				t.Errorf("writers' BatchSize (-want +got):\n%s", diff)
			}
			if tt.cfg.OverwriteWriter != nil && calls != len(p.set.Load().writers) {
				t.Errorf("OverwriteWriter called %d times for %d writers", calls, len(p.set.Load().writers))
			}
			for n, want := range tt.calls {
				if got := p.set.Load().writerFor(n).BatchSize; got != want {
					t.Errorf("a call of %d records goes to the writer of BatchSize %d, want %d", n, got, want)
				}
			}
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

// TestFromRecordPartitionKeyFromTheKey: another producer's CloudEvent that
// carries its partitionkey as the record key only (the Kafka binding maps
// the attribute to the key) gets it as ce_partitionkey, so the consumer
// reads its aggregate id; a header wins over the key, and native records
// and keyless CloudEvents get none. Found by a new user's trial: the
// envelope's AggregateID was "".
func TestFromRecordPartitionKeyFromTheKey(t *testing.T) {
	ce := func(extra ...kafka.Header) []kafka.Header {
		return append([]kafka.Header{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("e-1")},
			{Key: "ce_source", Value: []byte("/billing")}, {Key: "ce_type", Value: []byte("billing.invoiced")},
		}, extra...)
	}
	for _, tc := range []struct {
		name    string
		key     string
		headers []kafka.Header
		wantID  string
	}{
		{"key only", "acct-7", ce(), "acct-7"},
		{"header and key", "acct-7", ce(kafka.Header{Key: "ce_partitionkey", Value: []byte("acct-8")}), "acct-8"},
		{"no key", "", ce(), ""},
		{"native record", "acct-7", []kafka.Header{{Key: runtime.MetadataEventType, Value: []byte("t")}}, ""},
	} {
		msg := fromRecord(kafka.Message{Topic: "billing", Key: []byte(tc.key), Value: []byte("{}"), Headers: tc.headers})
		if _, id := runtime.AggregateOf(msg.Metadata); id != tc.wantID {
			t.Errorf("%s: aggregate id %q, want %q (metadata %v)", tc.name, id, tc.wantID, msg.Metadata)
		}
	}
}

// TestPartitionSubscriptionConfig checks that a subscription (without
// SerialPartitions, or of SubscribePartitions) carries every setting to the
// kafka-go ConsumerGroup that joins the group and to the Reader that fetches
// each assigned partition: the config's own fields and those set by
// OverwriteReaderConfig.
func TestPartitionSubscriptionConfig(t *testing.T) {
	dialer := &kafka.Dialer{ClientID: "billing-client"}
	errLog := kafka.LoggerFunc(func(string, ...any) {})
	s, err := NewSubscriber(SubscriberConfig{
		Brokers:           []string{"127.0.0.1:9092", "127.0.0.1:9093"},
		ConsumerGroup:     "billing",
		StartOffset:       kafka.LastOffset,
		MinBytes:          10,
		MaxBytes:          2e6,
		MaxWait:           2 * time.Second,
		HeartbeatInterval: 4 * time.Second,
		SessionTimeout:    40 * time.Second,
		RebalanceTimeout:  50 * time.Second,
		OverwriteReaderConfig: func(rc *kafka.ReaderConfig) {
			rc.Dialer = dialer
			rc.GroupBalancers = []kafka.GroupBalancer{kafka.RoundRobinGroupBalancer{}}
			rc.JoinGroupBackoff = time.Second
			rc.RetentionTime = time.Hour
			rc.WatchPartitionChanges = true
			rc.PartitionWatchInterval = 7 * time.Second
			rc.QueueCapacity = 7
			rc.IsolationLevel = kafka.ReadCommitted
			rc.ErrorLogger = errLog
		},
	})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer s.Close()
	rc := s.readerConfig("orders")

	gc := groupConfig(rc)
	type group struct {
		ID                                                   string
		Brokers, Topics                                      []string
		StartOffset                                          int64
		Heartbeat, Session, Rebalance, JoinBackoff, Retained time.Duration
		Watch                                                bool
		WatchInterval                                        time.Duration
		Balancers                                            int
	}
	gotG := group{gc.ID, gc.Brokers, gc.Topics, gc.StartOffset, gc.HeartbeatInterval, gc.SessionTimeout, gc.RebalanceTimeout,
		gc.JoinGroupBackoff, gc.RetentionTime, gc.WatchPartitionChanges, gc.PartitionWatchInterval, len(gc.GroupBalancers)}
	wantG := group{"billing", []string{"127.0.0.1:9092", "127.0.0.1:9093"}, []string{"orders"}, kafka.LastOffset,
		4 * time.Second, 40 * time.Second, 50 * time.Second, time.Second, time.Hour, true, 7 * time.Second, 1}
	if diff := cmp.Diff(wantG, gotG); diff != "" {
		t.Errorf("consumer group config (-want +got):\n%s", diff)
	}
	if gc.Dialer != dialer || gc.ErrorLogger == nil {
		t.Errorf("consumer group Dialer, ErrorLogger = %p, %v; want %p and the configured logger", gc.Dialer, gc.ErrorLogger, dialer)
	}
	if err := gc.Validate(); err != nil {
		t.Errorf("consumer group config: %v", err)
	}

	pc := partitionReaderConfig(rc, 3)
	type reader struct {
		GroupID, Topic     string
		Partition          int
		MinBytes, MaxBytes int
		QueueCapacity      int
		MaxWait, ReadLag   time.Duration
		ReadCommitted      bool
		Brokers            []string
	}
	gotR := reader{pc.GroupID, pc.Topic, pc.Partition, pc.MinBytes, pc.MaxBytes, pc.QueueCapacity, pc.MaxWait, pc.ReadLagInterval,
		pc.IsolationLevel == kafka.ReadCommitted, pc.Brokers}
	wantR := reader{"", "orders", 3, 10, 2e6, 7, 2 * time.Second, -1, true, []string{"127.0.0.1:9092", "127.0.0.1:9093"}}
	if diff := cmp.Diff(wantR, gotR); diff != "" {
		t.Errorf("partition reader config (-want +got):\n%s", diff)
	}
	if pc.Dialer != dialer || pc.ErrorLogger == nil {
		t.Errorf("partition reader Dialer, ErrorLogger = %p, %v; want %p and the configured logger", pc.Dialer, pc.ErrorLogger, dialer)
	}
	if err := pc.Validate(); err != nil {
		t.Errorf("partition reader config: %v", err)
	}
}

// TestFailedCommitsLogOncePerGeneration: while a rebalance ends the
// generation, every ack's commit fails alike (a trial logged 300 – 700 INFO
// lines a second for 4 s on each rebalance); the committer logs the first
// failure of a generation at INFO and the others at DEBUG, keeps the
// offsets, and commits them through the next generation.
func TestFailedCommitsLogOncePerGeneration(t *testing.T) {
	logger := watermill.NewCaptureLogger()
	var committed []map[int]int64
	broken := &kafka.Generation{ID: 1}
	c := &committer{topic: "t", logger: logger, pending: make(map[int]int64), wake: make(chan struct{}, 1),
		commit: func(gen *kafka.Generation, offsets map[string]map[int]int64) error {
			if gen == broken {
				return errors.New("write tcp: use of closed network connection")
			}
			committed = append(committed, offsets["t"])
			return nil
		}}
	c.setGeneration(broken)
	for off := range int64(50) {
		c.add(kafka.Message{Partition: 0, Offset: off})
		c.flush()
	}
	infos := func() int {
		n := 0
		for _, e := range logger.Captured()[watermill.InfoLogLevel] {
			if strings.HasPrefix(e.Msg, "commit failed") {
				n++
			}
		}
		return n
	}
	if n := infos(); n != 1 {
		t.Errorf("%d INFO lines for 50 failed commits of one generation, want 1", n)
	}
	if n := len(logger.Captured()[watermill.DebugLogLevel]); n < 49 {
		t.Errorf("%d DEBUG lines, want the 49 other failures", n)
	}
	c.setGeneration(&kafka.Generation{ID: 2})
	c.flush()
	if len(committed) != 1 || committed[0][0] != 50 {
		t.Errorf("committed %v through the next generation, want partition 0 at offset 50", committed)
	}
	c.setGeneration(broken) // a later generation fails again: logged again
	c.add(kafka.Message{Partition: 0, Offset: 50})
	c.flush()
	if n := infos(); n != 2 {
		t.Errorf("%d INFO lines after a failure in a new generation, want 2", n)
	}
}
