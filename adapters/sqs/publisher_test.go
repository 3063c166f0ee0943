package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/adapters/sqs"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
	"github.com/gooutbox/outbox/runtime"
)

// recorder is an http.RoundTripper that records the SendMessageBatch
// requests the SDK sends, so tests check what the publisher asked of SQS
// whatever the endpoint does with it.
type recorder struct {
	mu      sync.Mutex
	batches []recordedBatch
}

type recordedBatch struct {
	bytes   int // body and attributes of all entries, as SQS counts them
	entries []recordedEntry
}

type recordedEntry struct {
	Id                     string
	MessageBody            string
	MessageGroupId         string
	MessageDeduplicationId string
	MessageAttributes      map[string]struct{ DataType, StringValue string }
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch" {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var in struct{ Entries []recordedEntry }
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, err
		}
		b := recordedBatch{entries: in.Entries}
		for _, e := range in.Entries {
			b.bytes += len(e.MessageBody)
			for k, v := range e.MessageAttributes {
				b.bytes += len(k) + len(v.DataType) + len(v.StringValue)
			}
		}
		r.mu.Lock()
		r.batches = append(r.batches, b)
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) Batches() []recordedBatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedBatch(nil), r.batches...)
}

// recordingConfig returns a ClientConfig whose SQS client records its
// SendMessageBatch requests in rec.
func recordingConfig(endpoint string, rec *recorder) sqs.ClientConfig {
	cfg := clientConfig(endpoint)
	cfg.SQSOptions = []func(*awssqs.Options){func(o *awssqs.Options) { o.HTTPClient = &http.Client{Transport: rec} }}
	return cfg
}

// event returns a message of aggregate agg with envelope-like metadata.
func event(agg string, seq int, payload []byte) *message.Message {
	id := uuid.Must(uuid.NewV7()).String()
	msg := message.NewMessage(id, payload)
	msg.Metadata.Set(runtime.MetadataEventID, id)
	msg.Metadata.Set(runtime.MetadataEventType, "test.event")
	msg.Metadata.Set(runtime.MetadataEventVersion, "1")
	msg.Metadata.Set(runtime.MetadataAggregateType, "test")
	msg.Metadata.Set(runtime.MetadataAggregateID, agg)
	msg.Metadata.Set(runtime.MetadataOccurredAt, time.Now().UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set("seq", fmt.Sprint(seq))
	return msg
}

// TestPublishOrderPerAggregate publishes 5,000 messages of 200 aggregates
// in relay-sized calls and reads them back with two competing subscribers:
// each aggregate's messages arrive in publish order (FIFO message groups),
// each message once. Against the in-process fake this checks the group
// ordering the fake implements as SQS documents it; against
// OUTBOX_TEST_SQS_ENDPOINT it checks the endpoint's.
func TestPublishOrderPerAggregate(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	rec := &recorder{}
	pub := newPublisher(t, sqs.PublisherConfig{AWS: recordingConfig(endpoint, rec), CreateQueue: true})

	const aggregates, perAggregate, callSize = 200, 25, 100
	var msgs []*message.Message
	for seq := range perAggregate {
		for a := range aggregates {
			msgs = append(msgs, event(fmt.Sprintf("agg-%03d", a), seq, []byte(fmt.Sprintf(`{"seq":%d}`, seq))))
		}
	}
	for i := 0; i < len(msgs); i += callSize {
		if err := pub.Publish(topic, msgs[i:i+callSize]...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	// What the publisher sent: group = aggregate_id, deduplication id =
	// message UUID, at most 10 entries a request, in order.
	sent := 0
	for _, b := range rec.Batches() {
		if len(b.entries) > 10 {
			t.Fatalf("a SendMessageBatch request has %d entries", len(b.entries))
		}
		for _, e := range b.entries {
			want := msgs[sent]
			if e.MessageGroupId != want.Metadata.Get(runtime.MetadataAggregateID) || e.MessageDeduplicationId != want.UUID {
				t.Fatalf("entry %d: group %q dedup %q, want %q %q", sent, e.MessageGroupId, e.MessageDeduplicationId, want.Metadata.Get(runtime.MetadataAggregateID), want.UUID)
			}
			sent++
		}
	}
	if sent != len(msgs) {
		t.Fatalf("sent %d entries, want %d", sent, len(msgs))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type got struct{ agg, seq, uuid string }
	all := make(chan got, len(msgs))
	for range 2 {
		sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint)})
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		go func() {
			for m := range ch {
				all <- got{m.Metadata.Get(runtime.MetadataAggregateID), m.Metadata.Get("seq"), m.UUID}
				m.Ack()
			}
		}()
	}
	next := make(map[string]int)
	seen := make(map[string]bool)
	deadline := time.After(2 * time.Minute)
	for n := 0; n < len(msgs); n++ {
		select {
		case g := <-all:
			if seen[g.uuid] {
				t.Fatalf("message %s delivered twice", g.uuid)
			}
			seen[g.uuid] = true
			if want := fmt.Sprint(next[g.agg]); g.seq != want {
				t.Fatalf("aggregate %s: got seq %s, want %s", g.agg, g.seq, want)
			}
			next[g.agg]++
		case <-deadline:
			t.Fatalf("received %d of %d messages", n, len(msgs))
		}
	}
}

// TestPublishChunks checks the batching: at most 10 entries and at most
// 256 KiB (body plus attributes) per SendMessageBatch request, in order.
func TestPublishChunks(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	rec := &recorder{}
	pub := newPublisher(t, sqs.PublisherConfig{AWS: recordingConfig(endpoint, rec), CreateQueue: true})

	var small []*message.Message
	for i := range 25 {
		small = append(small, event(fmt.Sprint("a", i), 0, []byte(`{}`)))
	}
	if err := pub.Publish(topic, small...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := entryCounts(rec.Batches()); fmt.Sprint(got) != "[10 10 5]" {
		t.Fatalf("25 small messages went in requests of %v entries, want [10 10 5]", got)
	}

	// A request holds at most one message of a group: a message group's
	// second message starts a new request.
	rec3 := &recorder{}
	pub3 := newPublisher(t, sqs.PublisherConfig{AWS: recordingConfig(endpoint, rec3), CreateQueue: true})
	grouped := []*message.Message{event("g1", 0, nil), event("g2", 0, nil), event("g1", 1, nil), event("g3", 0, nil), event("g3", 1, nil)}
	if err := pub3.Publish(topic, grouped...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := entryCounts(rec3.Batches()); fmt.Sprint(got) != "[2 2 1]" {
		t.Fatalf("groups g1 g2 g1 g3 g3 went in requests of %v entries, want [2 2 1]", got)
	}

	rec2 := &recorder{}
	pub2 := newPublisher(t, sqs.PublisherConfig{AWS: recordingConfig(endpoint, rec2), CreateQueue: true})
	var big []*message.Message
	for i := range 5 {
		big = append(big, event(fmt.Sprint("b", i), i, bytes.Repeat([]byte("x"), 100*1024)))
	}
	if err := pub2.Publish(topic, big...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	batches := rec2.Batches()
	if got := entryCounts(batches); fmt.Sprint(got) != "[2 2 1]" {
		t.Fatalf("5 messages of 100 KiB went in requests of %v entries, want [2 2 1]", got)
	}
	for i, b := range batches {
		if b.bytes > sqs.DefaultMaxMessageBytes {
			t.Fatalf("request %d holds %d bytes, more than %d", i, b.bytes, sqs.DefaultMaxMessageBytes)
		}
	}
}

func entryCounts(bs []recordedBatch) []int {
	var n []int
	for _, b := range bs {
		n = append(n, len(b.entries))
	}
	return n
}

// publishErrors returns the per-message errors err wraps.
func publishErrors(t *testing.T, err error, n int) runtime.PublishErrors {
	t.Helper()
	var perMessage runtime.PublishErrors
	if !errors.As(err, &perMessage) {
		t.Fatalf("Publish error %v does not wrap runtime.PublishErrors", err)
	}
	if len(perMessage) != n {
		t.Fatalf("PublishErrors has %d elements, want %d", len(perMessage), n)
	}
	return perMessage
}

// drain receives n messages from topic's queue and returns their seq
// metadata per aggregate, then checks that nothing else arrives.
func drain(t *testing.T, endpoint, topic string, n int) map[string][]string {
	t.Helper()
	sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	out := make(map[string][]string)
	for range n {
		m := receive(t, ch)
		out[m.Metadata.Get(runtime.MetadataAggregateID)] = append(out[m.Metadata.Get(runtime.MetadataAggregateID)], m.Metadata.Get("seq"))
		m.Ack()
	}
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %s %v", m.UUID, m.Metadata)
	case <-time.After(2 * testWaitTime):
	}
	return out
}

// TestPublishTooLarge: a message over 256 KiB fails alone and permanently;
// the later message of its aggregate is held back (retryable), other
// aggregates' messages are sent.
func TestPublishTooLarge(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true})
	msgs := []*message.Message{
		event("a", 0, []byte(`{}`)),
		event("b", 0, bytes.Repeat([]byte("x"), 256*1024)),
		event("a", 1, []byte(`{}`)),
		event("b", 1, []byte(`{}`)),
	}
	err := pub.Publish(topic, msgs...)
	errs := publishErrors(t, err, len(msgs))
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("aggregate a failed: %v", errs)
	}
	if !runtime.IsPermanent(errs[1]) || !errors.Is(errs[1], sqs.ErrMessageTooLarge) {
		t.Fatalf("oversized message: %v, want permanent ErrMessageTooLarge", errs[1])
	}
	if errs[3] == nil || runtime.IsPermanent(errs[3]) {
		t.Fatalf("message after the oversized one in its group: %v, want a retryable error", errs[3])
	}
	got := drain(t, endpoint, topic, 2)
	if fmt.Sprint(got) != "map[a:[0 1]]" {
		t.Fatalf("received %v, want map[a:[0 1]]", got)
	}
}

// TestPublishEntryFailures maps per-entry failures of SendMessageBatch
// into PublishErrors: SenderFault=true is permanent, other failures are
// retryable, and the later messages of a failed group are not sent.
func TestPublishEntryFailures(t *testing.T) {
	t.Parallel()
	srv := sqstest.NewServer(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(srv.URL()), CreateQueue: true})
	srv.FailEntries(func(e sqstest.Entry) *sqstest.Fault {
		switch e.Attributes["seq"] + "/" + e.GroupID {
		case "1/a":
			return &sqstest.Fault{Code: "InternalError", Message: "try again"}
		case "0/b":
			return &sqstest.Fault{Code: "InvalidParameterValue", Message: "refused", SenderFault: true}
		}
		return nil
	})
	var msgs []*message.Message
	for seq := range 3 {
		for _, agg := range []string{"a", "b", "c"} {
			msgs = append(msgs, event(agg, seq, []byte(`{}`)))
		}
	}
	err := pub.Publish(topic, msgs...)
	errs := publishErrors(t, err, len(msgs))
	want := map[string]string{ // aggregate/seq -> nil, retry, permanent
		"a/0": "nil", "a/1": "retry", "a/2": "retry",
		"b/0": "permanent", "b/1": "retry", "b/2": "retry",
		"c/0": "nil", "c/1": "nil", "c/2": "nil",
	}
	for i, m := range msgs {
		key := m.Metadata.Get(runtime.MetadataAggregateID) + "/" + m.Metadata.Get("seq")
		got := "nil"
		if errs[i] != nil {
			got = "retry"
			if runtime.IsPermanent(errs[i]) {
				got = "permanent"
			}
		}
		if got != want[key] {
			t.Errorf("%s: %s (%v), want %s", key, got, errs[i], want[key])
		}
	}
	srv.FailEntries(nil)
	got := drain(t, srv.URL(), topic, 4)
	if fmt.Sprint(got) != "map[a:[0] c:[0 1 2]]" {
		t.Fatalf("received %v, want map[a:[0] c:[0 1 2]]", got)
	}
}

// TestPublishDedup: a republish with the same UUID (the relay's retry after
// an ambiguous failure) is dropped by SQS within its 5-minute window.
func TestPublishDedup(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true})
	first := event("a", 0, []byte(`{}`))
	again := first.Copy()
	if err := pub.Publish(topic, first); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(topic, again, event("a", 1, []byte(`{}`))); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, endpoint, topic, 2); fmt.Sprint(got) != "map[a:[0 1]]" {
		t.Fatalf("received %v, want map[a:[0 1]]", got)
	}
}

// TestPublishInvalidTopic: a topic that maps to no queue name fails the
// whole call permanently; a missing queue without CreateQueue is retryable.
func TestPublishInvalidTopic(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint)})
	for _, topic := range []string{"", ".fifo", strings.Repeat("t", 76)} {
		err := pub.Publish(topic, event("a", 0, nil))
		if !runtime.IsPermanent(err) || !errors.Is(err, sqs.ErrInvalidTopic) {
			t.Errorf("Publish to %q: %v, want a permanent ErrInvalidTopic", topic, err)
		}
	}
	err := pub.Publish(newTopic(), event("a", 0, nil))
	if err == nil || runtime.IsPermanent(err) {
		t.Fatalf("Publish to a missing queue: %v, want a retryable error", err)
	}
}

// TestMessageFormat round-trips payloads SQS cannot carry as they are
// (binary, empty) and metadata that does not fit in 10 attributes.
func TestMessageFormat(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true})
	binary := message.NewMessage(watermill.NewUUID(), []byte{0xff, 0x00, 0x01})
	empty := message.NewMessage(watermill.NewUUID(), nil)
	many := message.NewMessage(watermill.NewUUID(), []byte("text"))
	for i := range 12 {
		many.Metadata.Set(fmt.Sprint("key", i), fmt.Sprint("value", i))
	}
	many.Metadata.Set("blank", "")
	odd := message.NewMessage(watermill.NewUUID(), []byte("x"))
	odd.Metadata.Set("AWS.reserved", "v")
	sent := []*message.Message{binary, empty, many, odd}
	if err := pub.Publish(topic, sent...); err != nil {
		t.Fatal(err)
	}
	sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint)})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range sent {
		got := receive(t, ch)
		got.Ack()
		if got.UUID != want.UUID || !bytes.Equal(got.Payload, want.Payload) || fmt.Sprint(got.Metadata) != fmt.Sprint(want.Metadata) {
			t.Errorf("got %s %q %v, want %s %q %v", got.UUID, got.Payload, got.Metadata, want.UUID, want.Payload, want.Metadata)
		}
	}
}

// TestNackRedeliversGroupInOrder: a nacked message comes back before the
// rest of its group.
func TestNackRedeliversGroupInOrder(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true})
	if err := pub.Publish(topic, event("a", 0, nil), event("a", 1, nil), event("a", 2, nil)); err != nil {
		t.Fatal(err)
	}
	sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint)})
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, nack := range []bool{false, true, false, true, false} {
		m := receive(t, ch)
		order = append(order, m.Metadata.Get("seq"))
		if nack {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	if fmt.Sprint(order) != "[0 1 1 2 2]" {
		t.Fatalf("deliveries %v, want [0 1 1 2 2]", order)
	}
}

// TestSNSPublishWithoutSubscribers: SNS accepts a message for a topic with
// no subscription and delivers it to no one, so the publisher refuses,
// retryably, until a group's queue is subscribed; then the same messages go
// out and the group receives them.
func TestSNSPublishWithoutSubscribers(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newSNSPublisher(t, sqs.SNSPublisherConfig{AWS: clientConfig(endpoint)})
	msgs := []*message.Message{event("a", 0, []byte(`{}`)), event("a", 1, []byte(`{}`))}
	err := pub.Publish(topic, msgs...)
	if !errors.Is(err, sqs.ErrNoSubscribers) || runtime.IsPermanent(err) {
		t.Fatalf("Publish to a topic without subscriptions: %v, want a retryable ErrNoSubscribers", err)
	}
	sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint), ConsumerGroup: "billing", CreateQueue: true})
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish after a group subscribed: %v", err)
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range msgs {
		select {
		case m := <-ch:
			if m.UUID != want.UUID {
				t.Fatalf("message %d: %s, want %s", i, m.UUID, want.UUID)
			}
			m.Ack()
		case <-time.After(2 * testWaitTime):
			t.Fatalf("message %d not received", i)
		}
	}
}

// TestSNSFanOut publishes through SNS to two consumer groups: each gets
// every message, per aggregate in order, and the SNS requests carry the
// group and deduplication ids.
func TestSNSFanOut(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	var chans []<-chan *message.Message
	for _, group := range []string{"billing", "shipping"} {
		sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint), ConsumerGroup: group, CreateQueue: true})
		ch, err := sub.Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	pub := newSNSPublisher(t, sqs.SNSPublisherConfig{AWS: clientConfig(endpoint)})
	var msgs []*message.Message
	for seq := range 15 {
		for _, agg := range []string{"a", "b"} {
			msgs = append(msgs, event(agg, seq, []byte(`{}`)))
		}
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(topic, msgs[0].Copy()); err != nil { // a duplicate
		t.Fatal(err)
	}
	for _, ch := range chans {
		next := map[string]int{}
		for range msgs {
			m := receive(t, ch)
			agg := m.Metadata.Get(runtime.MetadataAggregateID)
			if m.Metadata.Get("seq") != fmt.Sprint(next[agg]) {
				t.Fatalf("aggregate %s: got seq %s, want %d", agg, m.Metadata.Get("seq"), next[agg])
			}
			next[agg]++
			m.Ack()
		}
		select {
		case m := <-ch:
			t.Fatalf("unexpected message %v", m.Metadata)
		case <-time.After(2 * testWaitTime):
		}
	}
}

// TestSNSPublishEntryFailures maps PublishBatch's per-entry failures as
// SendMessageBatch's are mapped, and refuses oversized messages before
// sending them.
func TestSNSPublishEntryFailures(t *testing.T) {
	t.Parallel()
	srv := sqstest.NewServer(t)
	topic := newTopic()
	pub := newSNSPublisher(t, sqs.SNSPublisherConfig{AWS: clientConfig(srv.URL()), AllowNoSubscribers: true})
	srv.FailEntries(func(e sqstest.Entry) *sqstest.Fault {
		switch e.GroupID {
		case "a":
			return &sqstest.Fault{Code: "InternalError", Message: "try again"}
		case "b":
			return &sqstest.Fault{Code: "InvalidParameter", Message: "refused", SenderFault: true}
		}
		return nil
	})
	msgs := []*message.Message{
		event("a", 0, nil), event("b", 0, nil), event("c", 0, nil),
		event("d", 0, bytes.Repeat([]byte("x"), 256*1024)), event("a", 1, nil),
	}
	errs := publishErrors(t, pub.Publish(topic, msgs...), len(msgs))
	switch {
	case errs[0] == nil || runtime.IsPermanent(errs[0]):
		t.Errorf("a/0: %v, want retryable", errs[0])
	case !runtime.IsPermanent(errs[1]):
		t.Errorf("b/0: %v, want permanent", errs[1])
	case errs[2] != nil:
		t.Errorf("c/0: %v, want nil", errs[2])
	case !errors.Is(errs[3], sqs.ErrMessageTooLarge) || !runtime.IsPermanent(errs[3]):
		t.Errorf("d/0: %v, want permanent ErrMessageTooLarge", errs[3])
	case errs[4] == nil || runtime.IsPermanent(errs[4]):
		t.Errorf("a/1: %v, want retryable (held back behind a/0)", errs[4])
	}
}

// TestCloseReleasesMessages: messages a subscription received but did not
// get acked are visible again at once after Close, not after the queue's
// 30s visibility timeout, so another subscriber continues with them in
// order.
func TestCloseReleasesMessages(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true})
	if err := pub.Publish(topic, event("a", 0, nil), event("a", 1, nil), event("a", 2, nil)); err != nil {
		t.Fatal(err)
	}
	first, err := sqs.NewSubscriber(sqs.SubscriberConfig{AWS: clientConfig(endpoint), WaitTime: testWaitTime, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := first.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch) // handed out, never acked; 1 and 2 wait in the subscription
	if m.Metadata.Get("seq") != "0" {
		t.Fatalf("first delivery seq %s, want 0", m.Metadata.Get("seq"))
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, endpoint, topic, 3); fmt.Sprint(got) != "map[a:[0 1 2]]" {
		t.Fatalf("after Close, received %v, want map[a:[0 1 2]]", got)
	}
}

// TestRedriveIsNotADuplicate: a dead letter published again to its FIFO
// queue (a re-drive: the same UUID, with runtime/consumer's outbox_dlq_at
// metadata) within SQS's 5-minute deduplication window is delivered, with
// the event's UUID; the same re-drive again is a duplicate. SQS dropped the
// re-drive as a duplicate of the original (its deduplication id was the
// UUID), and Publish said nil.
func TestRedriveIsNotADuplicate(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	topic := newTopic()
	pub := newPublisher(t, sqs.PublisherConfig{AWS: clientConfig(endpoint), CreateQueue: true})
	orig := event("a", 1, []byte(`{"seq":1}`))
	if err := pub.Publish(topic, orig); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	redrive := orig.Copy()
	redrive.Metadata.Set("outbox_dlq_at", "2026-12-03T10:20:00.123456789Z")
	for range 2 {
		if err := pub.Publish(topic, redrive); err != nil {
			t.Fatalf("Publish the re-drive: %v", err)
		}
	}
	// The aggregate's next event: its group delivers in order, so it
	// comes right after whatever the queue kept of the re-drives.
	next := event("a", 2, []byte(`{"seq":2}`))
	if err := pub.Publish(topic, next); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	sub := newSubscriber(t, sqs.SubscriberConfig{AWS: clientConfig(endpoint)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ uuid, dlq string }{
		{orig.UUID, ""}, {orig.UUID, "2026-12-03T10:20:00.123456789Z"}, {next.UUID, ""},
	} {
		m := receive(t, ch)
		if m.UUID != want.uuid || m.Metadata.Get("outbox_dlq_at") != want.dlq {
			t.Fatalf("message %d: uuid %s, outbox_dlq_at %q; want %s, %q", i, m.UUID, m.Metadata.Get("outbox_dlq_at"), want.uuid, want.dlq)
		}
		m.Ack()
	}
}
