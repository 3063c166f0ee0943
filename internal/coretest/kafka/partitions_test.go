package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// received is a message and the index of the stream it came on.
type received struct {
	stream int
	msg    *message.Message
}

// mergeStreams forwards every stream's messages to one channel, tagged.
func mergeStreams(streams <-chan (<-chan *message.Message)) <-chan received {
	out := make(chan received, 1000)
	go func() {
		i := 0
		for s := range streams {
			go func(i int, s <-chan *message.Message) {
				for m := range s {
					out <- received{i, m}
				}
			}(i, s)
			i++
		}
	}()
	return out
}

func next(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitTimeout):
		t.Fatalf("no message within %s", waitTimeout)
		return received{}
	}
}

// TestSubscribePartitions: each partition comes on a stream of its own,
// which hands out many messages before the first is acked, in order per
// key; a nack delivers the nacked message and every one after it on its
// stream again, in order; and the acks end up committed, all of them.
func TestSubscribePartitions(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 3)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	const keys, perKey = 6, 10
	var msgs []*message.Message
	for i := range perKey {
		for k := range keys {
			msgs = append(msgs, newEvent(fmt.Sprintf("agg-%d", k), strconv.Itoa(i)))
		}
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	group := "group-" + watermill.NewShortUUID()
	cfg := testSubscriberConfig(brokers, group)
	cfg.PartitionWindow = 100
	sub := newSubscriber(t, cfg)
	streams, err := sub.SubscribePartitions(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	in := mergeStreams(streams)

	// Everything arrives with nothing acked.
	byStream := map[int][]*message.Message{}
	got := map[string][]string{}
	for range msgs {
		r := next(t, in)
		byStream[r.stream] = append(byStream[r.stream], r.msg)
		agg := r.msg.Metadata.Get(runtime.MetadataAggregateID)
		got[agg] = append(got[agg], string(r.msg.Payload))
	}
	for k := range keys {
		agg := fmt.Sprintf("agg-%d", k)
		var want []string
		for i := range perKey {
			want = append(want, strconv.Itoa(i))
		}
		if diff := cmp.Diff(want, got[agg]); diff != "" {
			t.Errorf("%s on its stream (-want +got):\n%s", agg, diff)
		}
	}

	// On one stream: ack two, nack the third, ack the rest.
	nacked := 0
	for i, s := range byStream {
		if len(s) >= 3 {
			nacked = i
			break
		}
	}
	s := byStream[nacked]
	for i, m := range s {
		if i == 2 {
			m.Nack()
		} else {
			m.Ack()
		}
	}
	for i, st := range byStream {
		if i != nacked {
			for _, m := range st {
				m.Ack()
			}
		}
	}
	var again []string
	for range s[2:] {
		r := next(t, in)
		if r.stream != nacked {
			t.Fatalf("redelivery on stream %d, want %d", r.stream, nacked)
		}
		again = append(again, r.msg.UUID)
		r.msg.Ack()
	}
	var want []string
	for _, m := range s[2:] {
		want = append(want, m.UUID)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("redelivered after the nack (-want +got):\n%s", diff)
	}

	// Every partition's committed offset reaches its end.
	client := &kafkago.Client{Addr: kafkago.TCP(brokers...)}
	deadline := time.Now().Add(waitTimeout)
	for {
		res, err := client.OffsetFetch(context.Background(), &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1, 2}}})
		if err != nil {
			t.Fatal(err)
		}
		var committed int64
		for _, p := range res.Topics[topic] {
			if p.CommittedOffset > 0 {
				committed += p.CommittedOffset
			}
		}
		if committed == int64(len(msgs)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets add up to %d, want %d", committed, len(msgs))
		}
		time.Sleep(50 * time.Millisecond) // polling the group's offsets
	}
}

// TestStuckStreamIsLogged: a stream whose reader stops acking stops its
// partition once its buffer is full; the subscriber says so at WARN,
// naming the partition, and at INFO once it moves again — found by a new
// user's trial, where one unknown-version event stopped a consumer with no
// line about it. (The member's other partitions go on meanwhile:
// TestStuckPartitionHoldsBackOnlyItself.)
func TestStuckStreamIsLogged(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewCluster(t)
	topic := newTopic(t, brokers, 2)
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers})
	var msgs []*message.Message
	for i := range 40 {
		for k := range 6 {
			msgs = append(msgs, newEvent(fmt.Sprintf("agg-%d", k), strconv.Itoa(i)))
		}
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	var logs runtimetest.LogBuffer
	cfg := testSubscriberConfig(brokers, "group-"+watermill.NewShortUUID())
	cfg.PartitionWindow = 2
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sub := newSubscriber(t, cfg)
	setStallWarnAfter(sub, 100*time.Millisecond)
	streams, err := sub.SubscribePartitions(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	in := mergeStreams(streams)
	first := next(t, in)
	stuck := first.stream
	held := []*message.Message{first.msg} // the stuck stream's, unacked
	seen := map[string]bool{first.msg.UUID: true}
	logged := func(text string) bool { return strings.Contains(logs.String(), text) }
	deadline := time.Now().Add(waitTimeout)
	for !logged("level=WARN msg=\"kafka: a partition's stream is full") {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN about the stuck stream within %s; logs:\n%s", waitTimeout, logs.String())
		}
		select {
		case r := <-in:
			seen[r.msg.UUID] = true
			if r.stream == stuck {
				held = append(held, r.msg)
			} else {
				r.msg.Ack()
			}
		case <-time.After(10 * time.Millisecond): // polling the log
		}
	}
	ri, ok := kafka.RecordInfoFromContext(held[0].Context())
	if !ok {
		t.Fatal("no RecordInfo on a delivered message")
	}
	if line := logs.String(); !strings.Contains(line, fmt.Sprintf("partition=%d", ri.Partition)) {
		t.Errorf("the WARN does not name partition %d:\n%s", ri.Partition, line)
	}
	for _, m := range held {
		m.Ack()
	}
	for len(seen) < len(msgs) {
		r := next(t, in)
		seen[r.msg.UUID] = true
		r.msg.Ack()
	}
	for !logged("kafka: partition moves again") {
		if time.Now().After(deadline) {
			t.Fatalf("no INFO once the stream moved again; logs:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the log
	}
}

// committedOffsets returns the group's committed offset of each of the
// topic's partitions (-1: none).
func committedOffsets(t *testing.T, brokers []string, group, topic string, partitions ...int) map[int]int64 {
	t.Helper()
	client := &kafkago.Client{Addr: kafkago.TCP(brokers...)}
	res, err := client.OffsetFetch(context.Background(), &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: partitions}})
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	got := make(map[int]int64)
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("OffsetFetch of partition %d: %v", p.Partition, p.Error)
		}
		got[p.Partition] = p.CommittedOffset
	}
	return got
}

// TestStuckPartitionHoldsBackOnlyItself: a partition whose reader stops
// acking (a poison message retried in place, a handler that hangs) holds
// back only itself. Its stream fills up (more than twice PartitionWindow
// records wait behind the unacked message) while another partition's
// messages, published afterwards, are all delivered and committed; the
// stuck partition's offset is not committed past what was acked; once its
// messages are acked, the rest of it arrives, in order, none missing, and
// is committed too. With one kafka-go reader for all the member's
// partitions, the other partition's records queued behind the stuck one's
// and never arrived (found by a new user's trial).
func TestStuckPartitionHoldsBackOnlyItself(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"SubscribePartitions", "Subscribe"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const (
				window          = 2
				stuckP, flowP   = 0, 1
				stuckN, flowN   = 10 * window, 10 * window
				stuckKey, flowK = "stuck", "flow"
			)
			brokers := kafkatest.NewCluster(t)
			topic := newTopic(t, brokers, 2)
			pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, OverwriteWriter: func(w *kafkago.Writer) {
				w.Balancer = kafkago.BalancerFunc(func(m kafkago.Message, _ ...int) int {
					if string(m.Key) == stuckKey {
						return stuckP
					}
					return flowP
				})
			}})
			events := func(key string, n int) []*message.Message {
				var msgs []*message.Message
				for i := range n {
					msgs = append(msgs, newEvent(key, strconv.Itoa(i)))
				}
				return msgs
			}
			if err := pub.Publish(topic, events(stuckKey, stuckN)...); err != nil {
				t.Fatalf("Publish: %v", err)
			}

			group := "group-" + watermill.NewShortUUID()
			cfg := testSubscriberConfig(brokers, group)
			cfg.PartitionWindow = window
			in := make(chan *message.Message, 100)
			if mode == "Subscribe" {
				ch, err := newSubscriber(t, cfg).Subscribe(context.Background(), topic)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					for m := range ch {
						in <- m
					}
				}()
			} else {
				streams, err := newSubscriber(t, cfg).SubscribePartitions(context.Background(), topic)
				if err != nil {
					t.Fatal(err)
				}
				merged := mergeStreams(streams)
				go func() {
					for r := range merged {
						in <- r.msg
					}
				}()
			}
			recv := func(what string) (*message.Message, int) {
				t.Helper()
				select {
				case m := <-in:
					ri, ok := kafka.RecordInfoFromContext(m.Context())
					if !ok {
						t.Fatal("no RecordInfo on a delivered message")
					}
					return m, ri.Partition
				case <-time.After(waitTimeout):
					t.Fatalf("no message within %s, waiting for %s", waitTimeout, what)
					return nil, 0
				}
			}

			// The stuck partition's first message is never acked (for
			// now): its stream fills up behind it.
			first, p := recv("the first message")
			if p != stuckP {
				t.Fatalf("first message from partition %d, want %d (the only one with records)", p, stuckP)
			}
			held := []*message.Message{first}
			// Published only now, so the other partition's records come
			// after every record of the stuck one.
			if err := pub.Publish(topic, events(flowK, flowN)...); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			var flowed []string
			for len(flowed) < flowN {
				m, p := recv(fmt.Sprintf("the flowing partition's messages (%d of %d received) while the other partition is stuck", len(flowed), flowN))
				if p == stuckP {
					held = append(held, m)
					continue
				}
				flowed = append(flowed, string(m.Payload))
				m.Ack()
			}
			var want []string
			for i := range flowN {
				want = append(want, strconv.Itoa(i))
			}
			if diff := cmp.Diff(want, flowed); diff != "" {
				t.Errorf("the flowing partition's messages, while the other is stuck (-want +got):\n%s", diff)
			}
			if len(held) > window {
				t.Errorf("%d of the stuck partition's messages handed out unacked, want at most PartitionWindow (%d)", len(held), window)
			}

			// The flowing partition's acks are committed; the stuck
			// partition's offset is not.
			deadline := time.Now().Add(waitTimeout)
			for {
				got := committedOffsets(t, brokers, group, topic, stuckP, flowP)
				if got[stuckP] > 0 {
					t.Fatalf("stuck partition committed up to offset %d with nothing acked", got[stuckP])
				}
				if got[flowP] == flowN {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("flowing partition committed up to %d within %s, want %d", got[flowP], waitTimeout, flowN)
				}
				time.Sleep(20 * time.Millisecond) // polling the group's offsets
			}

			// Acked, the stuck partition goes on: all of it, in order.
			var stuck []string
			for _, m := range held {
				stuck = append(stuck, string(m.Payload))
				m.Ack()
			}
			for len(stuck) < stuckN {
				m, p := recv(fmt.Sprintf("the formerly stuck partition's messages (%d of %d received)", len(stuck), stuckN))
				if p != stuckP {
					t.Fatalf("message from partition %d after all %d of it", p, flowN)
				}
				stuck = append(stuck, string(m.Payload))
				m.Ack()
			}
			want = want[:0]
			for i := range stuckN {
				want = append(want, strconv.Itoa(i))
			}
			if diff := cmp.Diff(want, stuck); diff != "" {
				t.Errorf("the stuck partition's messages, once acked (-want +got):\n%s", diff)
			}
			for {
				got := committedOffsets(t, brokers, group, topic, stuckP)
				if got[stuckP] == stuckN {
					break
				}
				if time.Now().After(deadline.Add(waitTimeout)) {
					t.Fatalf("stuck partition committed up to %d, want %d", got[stuckP], stuckN)
				}
				time.Sleep(20 * time.Millisecond) // polling the group's offsets
			}
		})
	}
}

// TestFetchFailureIsAWarning: a fetch that fails because the broker cannot
// be reached is a failure the subscriber handles (it tries again), so it is
// logged at WARN, not at ERROR (a new user's trial read "ERROR fetch failed
// ... connection refused" from a partition's reader during a broker
// outage, against the README's rule).
func TestFetchFailureIsAWarning(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	reader := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{dead}, Topic: "orders", Partition: 0, MaxAttempts: 1})
	defer reader.Close()
	var logs runtimetest.LogBuffer
	warn := slog.New(slog.NewTextHandler(&logs, nil)).With("topic", "orders", "partition", 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fetch(ctx, reader, warn, time.Millisecond)
	}()
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(logs.String(), `level=WARN msg="kafka: fetch failed, trying again"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN about the failed fetch within %s; logs:\n%s", waitTimeout, logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the log
	}
	cancel()
	<-done
	if l := logs.String(); !strings.Contains(l, "connection refused") || !strings.Contains(l, "partition=0") || strings.Contains(l, "level=ERROR") {
		t.Errorf("log of the failed fetch:\n%s", l)
	}
}
