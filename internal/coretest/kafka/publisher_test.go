package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime"
)

func newEvent(aggregateID string, payload string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(runtime.MetadataAggregateID, aggregateID)
	return msg
}

// TestPublishKeysByAggregateID checks that the default key is the
// aggregate_id, so all events of one aggregate land on one partition, in
// publish order, whichever Publish call carried them.
func TestPublishKeysByAggregateID(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 8)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})

	aggregates := []string{"order-1", "order-2", "order-3", "order-4", "order-5", "order-6"}
	const rounds = 4
	var want []string // "aggregate#round", in publish order
	for round := range rounds {
		var batch []*message.Message
		for _, agg := range aggregates {
			payload := fmt.Sprintf("%s#%d", agg, round)
			batch = append(batch, newEvent(agg, payload))
			want = append(want, payload)
		}
		if err := pub.Publish(topic, batch...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	partitionOf := map[string]int{}
	got := map[string][]string{} // aggregate -> payloads in delivery order
	for _, msg := range receiveN(t, subscribe(t, brokers, topic), len(want)) {
		info, ok := kafka.RecordInfoFromContext(msg.Context())
		if !ok {
			t.Fatal("RecordInfoFromContext reported false for a delivered message")
		}
		agg := msg.Metadata.Get(runtime.MetadataAggregateID)
		if string(info.Key) != agg {
			t.Errorf("record key = %q, want the aggregate id %q", info.Key, agg)
		}
		if p, seen := partitionOf[agg]; seen && p != info.Partition {
			t.Errorf("aggregate %s on partitions %d and %d, want one", agg, p, info.Partition)
		}
		partitionOf[agg] = info.Partition
		got[agg] = append(got[agg], string(msg.Payload))
	}
	for _, agg := range aggregates {
		var wantAgg []string
		for round := range rounds {
			wantAgg = append(wantAgg, fmt.Sprintf("%s#%d", agg, round))
		}
		if diff := cmp.Diff(wantAgg, got[agg]); diff != "" {
			t.Errorf("order of aggregate %s (-want +got):\n%s", agg, diff)
		}
	}
	partitions := map[int]bool{}
	for _, p := range partitionOf {
		partitions[p] = true
	}
	if len(partitions) < 2 {
		t.Errorf("%d aggregates used %d partition(s), want them spread over several", len(aggregates), len(partitions))
	}
}

// TestPublishWithoutAggregateID checks that a message without aggregate_id
// gets a nil key under the default Key.
func TestPublishWithoutAggregateID(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	msg := receiveN(t, subscribe(t, brokers, topic), 1)[0]
	info, _ := kafka.RecordInfoFromContext(msg.Context())
	if info.Key != nil {
		t.Errorf("record key = %q, want nil", info.Key)
	}
}

// TestRoundTrip checks that payload, metadata and UUID survive the trip.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})

	plain := message.NewMessage(watermill.NewUUID(), []byte(`{"total":42}`))
	plain.Metadata = message.Metadata{
		runtime.MetadataAggregateID:   "order-7",
		runtime.MetadataAggregateType: "order",
		runtime.MetadataEventType:     "order.placed",
		runtime.MetadataEventVersion:  "2",
		runtime.MetadataTraceParent:   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"empty":                       "",
		"unicode":                     "zażółć",
	}
	// Metadata that already carries an event_id keeps it, and the receiver
	// takes its UUID from it.
	explicit := message.NewMessage(watermill.NewUUID(), nil)
	explicit.Metadata.Set(runtime.MetadataEventID, "0190a6e4-7c3b-7def-8a4b-3c2d1e0f9a8b")
	if err := pub.Publish(topic, plain, explicit); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	got := receiveN(t, subscribe(t, brokers, topic), 2)

	wantMD := message.Metadata{runtime.MetadataEventID: plain.UUID}
	for k, v := range plain.Metadata {
		wantMD[k] = v
	}
	if got[0].UUID != plain.UUID {
		t.Errorf("UUID = %q, want %q", got[0].UUID, plain.UUID)
	}
	if diff := cmp.Diff(string(plain.Payload), string(got[0].Payload)); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantMD, got[0].Metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}

	if want := explicit.Metadata.Get(runtime.MetadataEventID); got[1].UUID != want {
		t.Errorf("UUID = %q, want the event_id metadata %q", got[1].UUID, want)
	}
	if len(got[1].Payload) != 0 {
		t.Errorf("payload = %q, want empty", got[1].Payload)
	}
}

// TestForeignRecordUUID checks that a record written by another producer,
// without an event_id header, gets a UUID that stays the same when it is
// delivered again.
func TestForeignRecordUUID(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), RequiredAcks: kafkago.RequireAll, BatchTimeout: 1}
	defer w.Close()
	if err := w.WriteMessages(context.Background(), kafkago.Message{Topic: topic, Value: []byte("foreign")}); err != nil {
		t.Fatalf("WriteMessages: %v", err)
	}

	ch := subscribe(t, brokers, topic)
	first := receive(t, ch)
	first.Nack()
	again := receive(t, ch)
	again.Ack()
	if first.UUID == "" || first.UUID != again.UUID {
		t.Errorf("UUIDs of one record delivered twice = %q, %q; want equal and non-empty", first.UUID, again.UUID)
	}
	if _, ok := again.Metadata[runtime.MetadataEventID]; ok {
		t.Errorf("metadata = %v, want no %s for a record without that header", again.Metadata, runtime.MetadataEventID)
	}
}

// produceCounter counts the produce requests and records kfake receives
// for one topic.
type produceCounter struct {
	mu       sync.Mutex
	requests int
	records  int
	err      error
}

func countProduces(c *kafkatest.Cluster, topic string) *produceCounter {
	pc := &produceCounter{}
	fake := c.Fake()
	fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		pc.mu.Lock()
		defer pc.mu.Unlock()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic != topic {
				continue
			}
			pc.requests++
			for _, p := range tp.Partitions {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(p.Records); err != nil {
					pc.err = err
					continue
				}
				pc.records += int(batch.NumRecords)
			}
		}
		return nil, nil, false
	})
	return pc
}

func (pc *produceCounter) counts() (requests, records int, err error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.requests, pc.records, pc.err
}

// TestPublishIsOneWrite checks that one Publish call is one write: its
// messages reach a one-partition topic in a single produce request, for
// calls of every size up to BatchSize, whichever of the publisher's writers
// serves them.
func TestPublishIsOneWrite(t *testing.T) {
	t.Parallel()
	cluster, brokers, topic := startCluster(t)
	counter := countProduces(cluster, topic)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})

	wantRequests, wantRecords := 0, 0
	for _, n := range []int{1, 2, 16, 17, 128, 129, 500, 1000} {
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = newEvent(fmt.Sprintf("order-%d", i), "x")
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatalf("Publish of %d: %v", n, err)
		}
		wantRequests++
		wantRecords += n
		requests, records, err := counter.counts()
		if err != nil {
			t.Fatalf("decode produce request: %v", err)
		}
		if requests != wantRequests || records != wantRecords {
			t.Fatalf("Publish of %d messages: %d produce requests with %d records so far, want %d with %d",
				n, requests, records, wantRequests, wantRecords)
		}
	}
}

// TestPublishKeepsOrderAcrossCallSizes checks that one aggregate's events
// reach its partition in the order of the Publish calls that follow each
// other, though calls of different sizes go through different writers.
func TestPublishKeepsOrderAcrossCallSizes(t *testing.T) {
	t.Parallel()
	cluster, err := kafkatest.Start(kafkatest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Addrs()
	topic := newTopic(t, brokers, 4)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	received := subscribe(t, brokers, topic)

	seq := 0
	for _, n := range []int{1, 200, 3, 17, 1, 129, 2} {
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = newEvent("order-1", strconv.Itoa(seq))
			seq++
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			t.Fatalf("Publish of %d: %v", n, err)
		}
	}
	for i, m := range receiveN(t, received, seq) {
		if got := string(m.Payload); got != strconv.Itoa(i) {
			t.Fatalf("message %d has payload %s: one aggregate's events out of order", i, got)
		}
	}
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: kafkatest.NewCluster(t)})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	for i := range 2 {
		if err := pub.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	err = pub.Publish("topic", newEvent("order-1", "x"))
	if !errors.Is(err, kafka.ErrPublisherClosed) {
		t.Errorf("Publish after Close = %v, want ErrPublisherClosed", err)
	}
}

// TestPublishMessageTooLarge checks that a record over BatchBytes fails the
// whole Publish with an error callers can inspect, and nothing is written.
func TestPublishMessageTooLarge(t *testing.T) {
	t.Parallel()
	cluster, brokers, topic := startCluster(t)
	counter := countProduces(cluster, topic)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, BatchBytes: 1024})

	small := newEvent("order-1", "small")
	large := newEvent("order-2", strings.Repeat("x", 2048))
	err := pub.Publish(topic, small, large)

	var tooLarge kafkago.MessageTooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("Publish of an oversized message = %v, want a kafka.MessageTooLargeError", err)
	}
	if got := headerValue(tooLarge.Message, runtime.MetadataEventID); got != large.UUID {
		t.Errorf("MessageTooLargeError.Message has event_id %q, want the large message's %q", got, large.UUID)
	}
	if len(tooLarge.Remaining) != 1 {
		t.Errorf("MessageTooLargeError.Remaining has %d messages, want 1", len(tooLarge.Remaining))
	}
	if !errors.Is(err, kafkago.MessageSizeTooLarge) {
		t.Errorf("errors.Is(%v, kafka.MessageSizeTooLarge) = false, want true", err)
	}
	// kafka-go's text is the broker's MESSAGE_TOO_LARGE ("the server has a
	// configurable maximum"): the message must send the reader to the
	// client's limit instead (found by a new user).
	if msg := err.Error(); !strings.Contains(msg, "larger than kafka.PublisherConfig.BatchBytes 1024") || !strings.Contains(msg, "refused by this client before sending") {
		t.Errorf("error %q does not name BatchBytes (1024) as the limit", msg)
	}
	if !runtime.IsPermanent(err) {
		t.Errorf("runtime.IsPermanent(%v) = false: the relay would retry a message that can never be written", err)
	}
	if requests, _, _ := counter.counts(); requests != 0 {
		t.Errorf("%d produce requests after a rejected Publish, want 0", requests)
	}
}

func headerValue(m kafkago.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestPublishKeyError checks that a failing Key function fails Publish with
// its error.
func TestPublishKeyError(t *testing.T) {
	t.Parallel()
	errNoKey := errors.New("no key")
	pub := newPublisher(t, kafka.PublisherConfig{
		Brokers: []string{"127.0.0.1:1"}, // never contacted
		Key:     func(string, *message.Message) ([]byte, error) { return nil, errNoKey },
	})
	if err := pub.Publish("topic", newEvent("order-1", "x")); !errors.Is(err, errNoKey) {
		t.Errorf("Publish = %v, want an error wrapping the Key error", err)
	}
}

// TestPublishCancelledContext checks that Publish stops when a message's
// context is cancelled, and says so.
func TestPublishCancelledContext(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 1)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	first, second := newEvent("order-1", "x"), newEvent("order-1", "y")
	second.SetContext(ctx)
	if err := pub.Publish(topic, first, second); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a cancelled message context = %v, want context.Canceled", err)
	}
}

// TestPublishReportsPerMessage: when one partition refuses a write and the
// others take it, Publish returns a runtime.PublishErrors with an error for
// exactly the refused partition's messages, so the relay marks the others
// and republishes only those.
func TestPublishReportsPerMessage(t *testing.T) {
	t.Parallel()
	// Three brokers, three partitions: each produce request holds one
	// partition (its leader's), so a control function can refuse one.
	cluster, err := kafkatest.Start(kafkatest.Config{Brokers: 3, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Addrs()
	topic := newTopic(t, brokers, 3)
	fake := cluster.Fake()
	// Requests holding partition 0 are refused (NOT_LEADER_FOR_PARTITION);
	// the others are written.
	fake.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		refused := false
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				refused = refused || rt.Topic == topic && rp.Partition == 0
			}
		}
		if !refused {
			return nil, nil, false
		}
		return kafkatest.RefuseProduce(req, kerr.NotLeaderForPartition.Code), nil, true
	})
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, MaxAttempts: 1, OverwriteWriter: func(w *kafkago.Writer) {
		// The key (the aggregate id) is the partition number.
		w.Balancer = kafkago.BalancerFunc(func(m kafkago.Message, partitions ...int) int {
			n, _ := strconv.Atoi(string(m.Key))
			return partitions[n%len(partitions)]
		})
	}})
	msgs := []*message.Message{newEvent("0", "a"), newEvent("1", "b"), newEvent("2", "c"), newEvent("0", "d")}
	err = pub.Publish(topic, msgs...)
	var perMessage runtime.PublishErrors
	if !errors.As(err, &perMessage) {
		t.Fatalf("Publish = %v, want an error wrapping runtime.PublishErrors", err)
	}
	if len(perMessage) != len(msgs) {
		t.Fatalf("PublishErrors has %d entries, want %d", len(perMessage), len(msgs))
	}
	for i, e := range perMessage {
		wantFailed := msgs[i].Metadata.Get(runtime.MetadataAggregateID) == "0"
		if (e != nil) != wantFailed {
			t.Errorf("message %d (partition %s): error %v, want failed=%v", i, msgs[i].Metadata.Get(runtime.MetadataAggregateID), e, wantFailed)
		}
		if e != nil && runtime.IsPermanent(e) {
			t.Errorf("message %d: NOT_LEADER_FOR_PARTITION reported permanent: %v", i, e)
		}
	}
}

// TestPublishToAMissingTopicSaysWhatToDo: with the default config a
// publish to a topic that does not exist fails (the relay retries it, and
// the events wait in the outbox) with an error that wraps kafka-go's
// UnknownTopicOrPartition and says how to fix it; with
// AllowAutoTopicCreation the broker creates the topic and the publish
// succeeds.
func TestPublishToAMissingTopicSaysWhatToDo(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, MaxAttempts: 1})
	err := pub.Publish("never-created", newEvent("order-1", "1"))
	if !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		t.Fatalf("Publish to a missing topic = %v; want an error wrapping UnknownTopicOrPartition", err)
	}
	if runtime.IsPermanent(err) {
		t.Errorf("Publish to a missing topic = %v; want a retryable error (the topic may be created later)", err)
	}
	if !strings.Contains(err.Error(), "AllowAutoTopicCreation") {
		t.Errorf("Publish to a missing topic = %q; want it to name AllowAutoTopicCreation", err)
	}

	auto := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, AllowAutoTopicCreation: true})
	if err := auto.Publish("created-on-publish", newEvent("order-1", "1")); err != nil {
		t.Fatalf("Publish with AllowAutoTopicCreation = %v", err)
	}
}
