package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestErrorClasses: the publisher classes what kafka-go returns per
// message: a code Kafka calls retriable and a lost connection are
// transient, a record too large permanent, anything else neither.
func TestErrorClasses(t *testing.T) {
	tests := []struct {
		name                 string
		err                  error
		transient, permanent bool
	}{
		{"not leader", kafkago.NotLeaderForPartition, true, false},
		{"leader not available", kafkago.LeaderNotAvailable, true, false},
		{"request timed out", kafkago.RequestTimedOut, true, false},
		{"not enough replicas", kafkago.NotEnoughReplicas, true, false},
		{"connection lost", io.EOF, true, false},
		{"dial", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true, false},
		{"one partition of a write", kafkago.WriteErrors{nil, kafkago.NotLeaderForPartition}, true, false},
		{"corrupt message", kafkago.InvalidMessage, false, false},
		{"invalid record", kafkago.InvalidRecord, false, false},
		{"unclassified", errors.New("boom"), false, false},
		{"too large", kafkago.MessageSizeTooLarge, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(tt.err)
			if got := runtime.IsTransient(err); got != tt.transient {
				t.Errorf("IsTransient(classify(%v)) = %v, want %v", tt.err, got, tt.transient)
			}
			if got := runtime.IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(classify(%v)) = %v, want %v", tt.err, got, tt.permanent)
			}
		})
	}
}

// TestRetriablePartitionErrorParksNothing: with MaxAttempts 3, a partition
// that refuses every write with NOT_LEADER_FOR_PARTITION (a leader
// election) for many more attempts than that, while the other partitions
// take theirs, parks nothing: once the partition heals, every message goes
// out. The same partition refusing with a code Kafka does not call
// retriable (INVALID_RECORD) parks its aggregate's first message at the
// third attempt, as a poison message should be.
func TestRetriablePartitionErrorParksNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     int16
		wantPark bool
	}{
		{"NotLeader", kerr.NotLeaderForPartition.Code, false},
		{"InvalidRecord", kerr.InvalidRecord.Code, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPartitionFailure(t, tc.code, tc.wantPark)
		})
	}
}

func testPartitionFailure(t *testing.T, code int16, wantPark bool) {
	const maxAttempts = 3
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 3, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Addrs()
	topic := newTopic(t, brokers, 3)
	fake := cluster.Fake()
	var refusing atomic.Bool
	var refused atomic.Int64
	refusing.Store(true)
	fake.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		if !refusing.Load() {
			return nil, nil, false
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic == topic && rp.Partition == 0 {
					refused.Add(1)
					return kafkatest.RefuseProduce(req, code), nil, true
				}
			}
		}
		return nil, nil, false
	})
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, MaxAttempts: 1, OverwriteWriter: func(w *kafkago.Writer) {
		// The key (the aggregate id) is the partition number.
		w.Balancer = kafkago.BalancerFunc(func(m kafkago.Message, partitions ...int) int {
			n, _ := strconv.Atoi(string(m.Key))
			return partitions[n%len(partitions)]
		})
	}})
	store := &runtimetest.MemoryStore{RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond, MaxAttempts: maxAttempts}
	// The relay claims when the test notifies it (and again at once after
	// a claim that found messages), never on a timer of its own: each
	// retry of aggregate 0 is then claimed with the messages the test adds
	// beside it, not alone because a poll happened to fall between them.
	r, err := relay.New(store, pub, relay.Config{
		PollInterval: time.Hour, ActivePollInterval: time.Hour, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	n := 0
	add := func(aggregates ...int) {
		for _, a := range aggregates {
			n++
			store.Add(outboxMessage(topic, a, n))
		}
		r.Notify()
	}
	add(0, 0, 0, 1, 2) // aggregate 0 goes to the refusing partition
	parked := func() int64 {
		st, err := store.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Parked
	}
	// Each round lets aggregate 0's retry fall due, then adds messages
	// for the other partitions and wakes the relay, so that the retry
	// fails beside messages that are published (an attempt that counts,
	// unless the failure is transient: a round with nothing published
	// looks like a broker outage and counts no attempt), until the
	// partition has refused far more writes than MaxAttempts, or something
	// was parked. (Paced by a poll, the retries sometimes all fell in
	// claims of their own, and nothing was parked: 1 run in 10.)
	deadline := time.Now().Add(waitTimeout)
	for refused.Load() < 4*maxAttempts && parked() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("partition 0 refused %d writes within %v; want %d", refused.Load(), waitTimeout, 4*maxAttempts)
		}
		time.Sleep(25 * time.Millisecond) // past MaxRetryDelay (20 ms): the retry is due; waiting for time, not for an event
		add(1, 2)
	}
	if got := parked(); wantPark != (got > 0) {
		t.Fatalf("after %d refused writes (MaxAttempts %d): %d messages parked, want parked=%v", refused.Load(), maxAttempts, got, wantPark)
	}
	if wantPark {
		for _, m := range store.Messages() {
			if !m.ParkedAt.IsZero() && (m.AggregateID != "0" || m.Attempts != maxAttempts) {
				t.Errorf("parked message %d of aggregate %s after %d attempts; want aggregate 0's first after %d", m.ID, m.AggregateID, m.Attempts, maxAttempts)
			}
		}
		return
	}
	refusing.Store(false) // the partition has a leader again
	deadline = time.Now().Add(waitTimeout)
	for len(store.Pending()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still pending %v after the partition healed", len(store.Pending()), waitTimeout)
		}
		r.Notify()                       // the relay claims only when woken (above)
		time.Sleep(5 * time.Millisecond) // polling for the relay to publish
	}
	for _, m := range store.Messages() {
		if m.Attempts != 0 {
			t.Errorf("message %d of aggregate %s: Attempts = %d after transient failures only, want 0", m.ID, m.AggregateID, m.Attempts)
		}
	}
}

// outboxMessage is message n of aggregate a, bound for topic.
func outboxMessage(topic string, a, n int) runtime.OutboxMessage {
	return runtime.OutboxMessage{
		Topic: topic,
		Envelope: runtime.Envelope{
			EventID:       uuid.Must(uuid.NewV7()),
			EventType:     "orders.order_placed",
			EventVersion:  1,
			AggregateType: "order",
			AggregateID:   strconv.Itoa(a),
			OccurredAt:    time.Now().UTC(),
			Payload:       fmt.Appendf(nil, `{"n":%d}`, n),
		},
	}
}

// TestPing: Ping fails for a port no broker listens on, and succeeds
// against a cluster.
func TestPing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := newPublisher(t, kafka.PublisherConfig{Brokers: []string{closed}}).Ping(ctx); err == nil {
		t.Errorf("Ping of %s, where no broker listens = nil, want an error", closed)
	}
	brokers := kafkatest.NewCluster(t)
	if err := newPublisher(t, kafka.PublisherConfig{Brokers: append([]string{closed}, brokers...)}).Ping(ctx); err != nil {
		t.Errorf("Ping of a cluster = %v, want nil (one of the bootstrap brokers answers)", err)
	}
}
