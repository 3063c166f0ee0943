package hooks_test

import (
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime/relay"
)

// TestBrokerFaultsLoseNothing runs the pipeline against a broker that first
// rejects produce requests (NOT_LEADER_FOR_PARTITION) and then answers some
// of them only after the client gave up waiting (written, but the ack lost:
// kafka-go retries and writes again). Every committed event must reach the
// broker, nothing else, and each aggregate's first deliveries must be in
// commit order; duplicates are allowed and reported.
func TestBrokerFaultsLoseNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: waits out broker timeouts")
	}
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	p := newPipelineOn(t, "postgres", 4, cluster.Addrs())

	fake := cluster.Fake()
	var rejected, delayed atomic.Int32
	fake.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		switch {
		case rejected.Load() < 15:
			rejected.Add(1)
			return kafkatest.RefuseProduce(req, kerr.NotLeaderForPartition.Code), nil, true
		case delayed.Load() < 3:
			delayed.Add(1)
			// Written after the client's write timeout: the client sees
			// no ack and writes the batch again.
			fake.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
			return nil, nil, false
		default:
			fake.DropControl()
			return nil, nil, false
		}
	})

	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: p.brokers, OverwriteWriter: func(w *kafkago.Writer) {
		w.WriteTimeout = 500 * time.Millisecond
		w.ReadTimeout = 500 * time.Millisecond
		w.MaxAttempts = 3
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	var failedBatches atomic.Int32
	p.runRelay(t, pub, relay.Config{BatchSize: 20, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		OnBatch: func(b relay.BatchResult) {
			if b.Err != nil || b.Failed > 0 {
				failedBatches.Add(1)
			}
		}})

	// 20 accounts, 8 deposits each, one transaction per deposit.
	accts := make([]Account, 20)
	if err := p.db.Create(&accts).Error; err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for range 8 {
		for i := range accts {
			accts[i].Deposit()
			want[accts[i].OutboxRecorder().Pending()[0].ID.String()] = true
			if err := p.db.Save(&accts[i]).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	p.waitDrained(t)
	recs := readTopic(t, p.brokers, p.topic)

	got := eventIDs(recs)
	for id := range want {
		if got[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
	duplicates := 0
	for id, n := range got {
		if !want[id] {
			t.Errorf("event %s on the broker was never committed", id)
		}
		duplicates += n - 1
	}
	// First deliveries per aggregate: seq 1, 2, 3, ... in offset order.
	next := map[string]int{}
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		if r.Seq != next[r.Key]+1 {
			t.Errorf("aggregate %s: first delivery of seq %d after %d", r.Key, r.Seq, next[r.Key])
		}
		next[r.Key] = r.Seq
	}
	if rejected.Load() == 0 || delayed.Load() == 0 || failedBatches.Load() == 0 {
		t.Errorf("faults injected: %d rejected, %d delayed produce requests, %d failed batches; want some of each",
			rejected.Load(), delayed.Load(), failedBatches.Load())
	}
	t.Logf("%d events, %d duplicates on the broker, %d failed batches", len(want), duplicates, failedBatches.Load())
}
