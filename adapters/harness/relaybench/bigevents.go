package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// Blob is the event of the large-event mode (-big-events): an opaque,
// incompressible payload of about -big-bytes bytes.
type Blob struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Data         string    `json:"data"`
}

// EventKey returns bench.blob version 1.
func (Blob) EventKey() runtime.Key { return runtime.Key{Type: "bench.blob", Version: 1} }

// EventTime returns when the blob was made.
func (b Blob) EventTime() time.Time { return b.OccurredAt }

// Validate accepts every blob.
func (Blob) Validate() error { return nil }

const bigTopic = "bench.blob"

// bigRun is the large-event mode: it pre-fills o.bigEvents events of about
// o.bigBytes bytes, drains them with the relay (MaxBatchBytes
// o.maxBatchBytes, the relay's default when 0) to an in-process kfake broker,
// and prints the events/s and the peak resident set size of the process
// during the drain.
//
// kfake keeps every record it stores in memory, which would measure the
// broker rather than the relay; the broker here acknowledges produce
// requests without storing them (a kfake control function).
func bigRun(ctx context.Context, o options, out io.Writer) error {
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 1, Partitions: 8,
		Options: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(1<<20 + 12)})}})
	if err != nil {
		return err
	}
	defer cluster.Close()
	discardProduce(cluster.Fake(), func(string) bool { return true })

	db, _, cleanup, err := openSchema(o.dsn)
	if err != nil {
		return err
	}
	defer cleanup()
	plugin, err := withPlugin(ctx, db, bigTopic)
	if err != nil {
		return err
	}
	store, err := newStore(db)
	if err != nil {
		return err
	}
	// BatchBytes 1 MiB (the default) fits one ~900 KB record per request.
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: cluster.Addrs(), AllowAutoTopicCreation: true, BatchBytes: 1 << 20})
	if err != nil {
		return err
	}
	defer pub.Close()

	fmt.Fprintf(out, "relaybench: large events: %d × %d B (%.0f MiB), PostgreSQL %s, kfake 1 broker (acks without storing)\n",
		o.bigEvents, o.bigBytes, float64(o.bigEvents)*float64(o.bigBytes)/(1<<20), redact(o.dsn))
	t0 := time.Now()
	if err := prefillBig(ctx, db, plugin, o.bigEvents, o.bigBytes, o.aggregates); err != nil {
		return err
	}
	fmt.Fprintf(out, "prefilled in %v\n", time.Since(t0).Round(time.Millisecond))

	// What the prefill left is not the relay's: return it to the system
	// and take the resident size the drain starts from.
	debug.FreeOSMemory()
	base, err := rssBytes()
	if err != nil {
		return err
	}
	sampler := startRSSSampler(10*time.Millisecond, o.rssLimit)
	var published atomic.Int64
	var batches atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	tp := &timingPublisher{Publisher: pub}
	r, err := relay.New(store, tp, relay.Config{MaxBatchBytes: o.maxBatchBytes, BatchSize: o.batch, OnBatch: func(b relay.BatchResult) {
		batches.Add(1)
		if published.Add(int64(b.Published)) >= int64(o.bigEvents) {
			once.Do(func() { close(done) })
		}
	}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- r.Run(rctx) }()
	select {
	case <-done:
	case err := <-errc:
		return fmt.Errorf("relay stopped before the drain ended: %w", err)
	case <-time.After(10 * time.Minute):
		return errors.New("large-event drain timed out")
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-errc; err != nil {
		return err
	}
	peak := sampler.stop()
	mbb := "default " + strconv.Itoa(relay.DefaultMaxBatchBytes)
	if o.maxBatchBytes != 0 {
		mbb = strconv.FormatInt(o.maxBatchBytes, 10)
	}
	fmt.Fprintf(out, "drain %d large events  MaxBatchBytes %s, BatchSize %d  %.0f events/s (%.0f MiB/s, %d batches)\n",
		o.bigEvents, mbb, effectiveBatch(o.batch), float64(o.bigEvents)/elapsed.Seconds(),
		float64(o.bigEvents)*float64(o.bigBytes)/(1<<20)/elapsed.Seconds(), batches.Load())
	fmt.Fprintf(out, "time in Publish: %v of %v\n", time.Duration(tp.total.Load()).Round(time.Millisecond), elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "RSS during the drain: start %.0f MiB, peak %.0f MiB\n", mib(base), mib(peak))
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// prefillBig writes n blobs of about size bytes, 20 per transaction, then
// VACUUM ANALYZE. The blobs share one random body (a per-event prefix keeps
// them distinct), which PostgreSQL cannot compress either.
func prefillBig(ctx context.Context, db *gorm.DB, p *hooks.Plugin, n, size, aggregates int) error {
	raw := make([]byte, size*3/4)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	body := base64.StdEncoding.EncodeToString(raw)
	for start := 0; start < n; start += 20 {
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			for i := start; i < min(start+20, n); i++ {
				evt := Blob{EventVersion: 1, OccurredAt: time.Now().UTC(), Data: strconv.Itoa(i) + body}
				if _, err := p.Enqueue(tx, "account", strconv.Itoa(i%aggregates), evt); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	return db.Exec(`VACUUM ANALYZE outbox_messages`).Error
}

// produceCounter counts the records a discarding broker acknowledged, per
// topic.
type produceCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

// get returns how many records of topic were acknowledged so far.
func (c *produceCounter) get(topic string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// discardProduce makes the cluster acknowledge the produce requests whose
// topics all satisfy discard without storing their records, and count them;
// other requests are handled as usual.
func discardProduce(fake *kfake.Cluster, discard func(topic string) bool) *produceCounter {
	var mu sync.Mutex
	next := map[string]int64{} // "topic/partition" → next offset
	counts := &produceCounter{n: map[string]int64{}}
	fake.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			if !discard(rt.Topic) {
				return nil, nil, false
			}
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				k := rt.Topic + "/" + strconv.Itoa(int(rp.Partition))
				sp.BaseOffset = next[k]
				n := int64(recordCount(rp.Records))
				next[k] += n
				counts.mu.Lock()
				counts.n[rt.Topic] += n
				counts.mu.Unlock()
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return counts
}

// recordCount returns the number of records of a produce request's record
// batch (1 when it cannot be read).
func recordCount(records []byte) int {
	var b kmsg.RecordBatch
	if err := b.ReadFrom(records); err != nil || b.NumRecords < 1 {
		return 1
	}
	return int(b.NumRecords)
}

// rssBytes returns the resident set size of this process (VmRSS).
func rssBytes() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("VmRSS:")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS: %w", err)
			}
			return kb << 10, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}

// rssSampler records the peak of VmRSS.
type rssSampler struct {
	stopc chan struct{}
	done  chan struct{}
	peak  atomic.Int64
}

// startRSSSampler samples VmRSS every interval until stop. When the RSS
// exceeds limit (bytes, 0 for none) the process exits with status 3: the
// run must not exhaust a shared machine.
func startRSSSampler(interval time.Duration, limit int64) *rssSampler {
	s := &rssSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if rss, err := rssBytes(); err == nil {
				if rss > s.peak.Load() {
					s.peak.Store(rss)
				}
				if limit > 0 && rss > limit {
					fmt.Fprintf(os.Stderr, "relaybench: RSS %.0f MiB exceeds -rss-limit %.0f MiB; stopping\n", mib(rss), mib(limit))
					os.Exit(3)
				}
			}
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the peak.
func (s *rssSampler) stop() int64 {
	close(s.stopc)
	<-s.done
	return s.peak.Load()
}
