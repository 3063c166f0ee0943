package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
)

// TestAbandonedPublishNeverLands reproduces the hole of a relay paused in
// the middle of a publish: kafka-go's WriteMessages returns when its
// context ends, while the batches it queued are still sent afterwards. A
// writer that lingers (BatchTimeout) longer than the call's deadline
// queues the batch past the call's end; Close flushes it. Nothing of the
// abandoned call may reach the log, and the next call publishes normally.
func TestAbandonedPublishNeverLands(t *testing.T) {
	t.Parallel()
	cluster, brokers, topic := startCluster(t)
	counter := countProduces(cluster, topic)
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: brokers,
		Logger:  testLogger(),
		OverwriteWriter: func(w *kafkago.Writer) {
			w.BatchTimeout = time.Minute // held until Close flushes it
			w.BatchSize = 10_000
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = pub.Close()
		}
	}()

	// Warm the writer of small calls up (BatchSize 16: a call of 16 fills
	// its batch, which goes at once), so that the next call gets as far as
	// queuing its batch before its deadline.
	warm := make([]*message.Message, 16)
	for i := range warm {
		warm[i] = newEvent("order-0", fmt.Sprintf("warm-%d", i))
	}
	if err := pub.Publish(topic, warm...); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stale := make([]*message.Message, 5)
	for i := range stale {
		stale[i] = newEvent("order-1", fmt.Sprintf("stale-%d", i))
		stale[i].SetContext(ctx)
	}
	if err := pub.Publish(topic, stale...); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish past its deadline = %v, want context.DeadlineExceeded", err)
	}
	// Close flushes every writer, the retired ones too: the stale batch is
	// written now, long after its call ended, unless it is fenced.
	if err := pub.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	closed = true
	requests, records, err := counter.counts()
	if err != nil {
		t.Fatal(err)
	}
	if records != len(warm) {
		t.Fatalf("%d records of an abandoned publish reached the broker (%d produce requests) after the call ended", records-len(warm), requests-1)
	}
}

// TestPublishAfterAnAbandonedOne checks that the writers built after an
// abandoned publish work: the next call, with a live deadline, lands, and
// nothing of the abandoned one does, though both go to the same partition.
func TestPublishAfterAnAbandonedOne(t *testing.T) {
	t.Parallel()
	_, brokers, topic := startCluster(t)
	// The first writers (three: see BatchSize) linger; those built after
	// the abandoned publish do not, so the next call's batch goes at once.
	var built atomic.Int32
	pub := newPublisher(t, kafka.PublisherConfig{
		Brokers: brokers,
		OverwriteWriter: func(w *kafkago.Writer) {
			if built.Add(1) <= 3 {
				w.BatchTimeout = time.Minute
			}
			w.BatchSize = 10_000
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	stale := newEvent("order-1", "stale")
	stale.SetContext(ctx)
	if err := pub.Publish(topic, stale); err == nil {
		t.Fatal("Publish past its deadline succeeded")
	}
	fresh := make([]*message.Message, 3)
	for i := range fresh {
		fresh[i] = newEvent("order-1", fmt.Sprintf("fresh-%d", i))
	}
	if err := pub.Publish(topic, fresh...); err != nil {
		t.Fatalf("Publish after an abandoned one: %v", err)
	}
	got := readAll(t, brokers, topic, len(fresh))
	for i, m := range got {
		if want := fmt.Sprintf("fresh-%d", i); string(m.Value) != want {
			t.Errorf("record %d = %q, want %q", i, m.Value, want)
		}
	}
}

// readAll reads the first n records of topic's partition 0, and fails the
// test when there are more by the time they are read.
func readAll(t *testing.T, brokers []string, topic string, n int) []kafkago.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, err := kafkago.DialLeader(ctx, "tcp", brokers[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	if err != nil {
		t.Fatal(err)
	}
	if last != int64(n) {
		t.Fatalf("partition 0 holds %d records, want %d", last, n)
	}
	if _, err := conn.Seek(0, kafkago.SeekAbsolute); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitTimeout))
	batch := conn.ReadBatch(1, 10<<20)
	defer batch.Close()
	out := make([]kafkago.Message, 0, n)
	for len(out) < n {
		m, err := batch.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}
