package consumer_test

// Tests through the Kafka adapter (kafka-go) against an in-process kfake
// cluster, or the cluster named by OUTBOX_TEST_KAFKA_BROKERS.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
	"github.com/gooutbox/outbox/runtime/consumer"
)

// broker is one test's Kafka cluster and topic.
type broker struct {
	addrs []string
	topic string
}

func newBroker(t *testing.T, partitions int) *broker {
	t.Helper()
	b := &broker{addrs: kafkatest.NewCluster(t), topic: fmt.Sprintf("orders-%d", rand.Int64())}
	b.createTopic(t, b.topic, partitions)
	return b
}

func (b *broker) createTopic(t testing.TB, topic string, partitions int) {
	t.Helper()
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: b.addrs, ConsumerGroup: "init", TopicPartitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		t.Fatal(err)
	}
}

func (b *broker) publisher(t testing.TB) *kafka.Publisher {
	t.Helper()
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: b.addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

// subscriber returns a member of group with short group timings, so that a
// replacement member takes over quickly.
func (b *broker) subscriber(t testing.TB, group string, tune ...func(*kafka.SubscriberConfig)) *kafka.Subscriber {
	t.Helper()
	cfg := kafka.SubscriberConfig{
		Brokers:           b.addrs,
		ConsumerGroup:     group,
		MaxWait:           100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    time.Second,
		RebalanceTimeout:  2 * time.Second,
	}
	for _, f := range tune {
		f(&cfg)
	}
	sub, err := kafka.NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// runRouter runs c on topic in a Watermill router until the test ends or
// the returned stop function is called.
// With members > 1 the router subscribes that many times: with
// adapters/kafka, that many group members share the topic's partitions.
func runRouter(t *testing.T, c *consumer.Consumer, sub message.Subscriber, topic string, members ...int) (stop func()) {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	if len(members) > 0 {
		n = members[0]
	}
	for i := range n {
		router.AddConsumerHandler(fmt.Sprintf("%s-%d", c.Name(), i), topic, sub, c.HandlerFunc())
	}
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router.Run = %v", err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := router.Close(); err != nil {
			t.Errorf("router.Close = %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("router.Run = %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// results returns an OnOutcome function and the channel it feeds.
func results() (func(consumer.Result), <-chan consumer.Result) {
	ch := make(chan consumer.Result, 1000)
	return func(r consumer.Result) { ch <- r }, ch
}

// next returns the next result, failing the test after 30s.
func next(t *testing.T, ch <-chan consumer.Result) consumer.Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no message handled within 30s")
		return consumer.Result{}
	}
}

// receive returns the next message of a subscription, failing after 30s.
func receive(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("subscription closed")
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
		return nil
	}
}

// TestKafkaCrashAfterCommitBeforeAck: a member applies an event (its
// transaction commits) and leaves the group without acking, as a process
// killed at that point does. The next member gets the record again, with
// the same UUID; the inbox turns it into an acked no-op.
func TestKafkaCrashAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	b := newBroker(t, 1)
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	onOutcome, res := results()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: onOutcome})
	must(t, consumer.Handle(c, drv, writeEffect("billing")))
	sent := paidMessage(t, 1, "o-1", 1)
	must(t, b.publisher(t).Publish(b.topic, sent))

	first := b.subscriber(t, "billing")
	msgs, err := first.Subscribe(context.Background(), b.topic)
	must(t, err)
	msg := receive(t, msgs)
	if err := c.HandlerFunc()(msg); err != nil {
		t.Fatal(err)
	}
	if r := next(t, res); r.Outcome != consumer.OutcomeApplied {
		t.Fatalf("first delivery: %+v", r)
	}
	must(t, first.Close()) // no ack: the offset is not committed

	second := b.subscriber(t, "billing")
	msgs, err = second.Subscribe(context.Background(), b.topic)
	must(t, err)
	again := receive(t, msgs)
	if again.UUID != sent.UUID {
		t.Fatalf("redelivered %s, want %s", again.UUID, sent.UUID)
	}
	if err := c.HandlerFunc()(again); err != nil {
		t.Fatal(err)
	}
	again.Ack()
	if r := next(t, res); r.Outcome != consumer.OutcomeDuplicate {
		t.Errorf("redelivery: %+v, want duplicate", r)
	}
	if n := len(effects(t, db)); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

// TestKafkaPoisonMessageDoesNotStallItsPartition: on a single partition, a
// message whose handler always fails is retried, dead-lettered with its
// reason, and the messages behind it are applied in order.
func TestKafkaPoisonMessageDoesNotStallItsPartition(t *testing.T) {
	t.Parallel()
	b := newBroker(t, 1)
	dlqTopic := b.topic + ".dlq"
	b.createTopic(t, dlqTopic, 1)
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	onOutcome, res := results()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{
		Name: "billing", DB: drv, OnOutcome: onOutcome,
		MaxRetries: 2, MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		DeadLetterPublisher: b.publisher(t), DeadLetterTopic: dlqTopic,
	})
	write := writeEffect("billing")
	must(t, consumer.Handle(c, drv, func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		if e.OrderID == "poison" {
			return errBoom
		}
		return write(ctx, tx, e, m)
	}))
	sent := []*message.Message{
		paidMessage(t, 1, "o-1", 1),
		paidMessage(t, 2, "poison", 1),
		paidMessage(t, 2, "o-1", 2),
		paidMessage(t, 1, "o-2", 1),
	}
	must(t, b.publisher(t).Publish(b.topic, sent...))
	runRouter(t, c, b.subscriber(t, "billing"), b.topic)

	var got []string
	for range sent {
		r := next(t, res)
		got = append(got, r.Outcome.String()+" "+string(r.Reason))
	}
	if diff := cmp.Diff([]string{"applied ", "dead_lettered handler", "applied ", "applied "}, got); diff != "" {
		t.Errorf("outcomes in delivery order (-want +got):\n%s", diff)
	}
	var applied []string
	for _, e := range effects(t, db) {
		applied = append(applied, fmt.Sprintf("%s#%d", e.OrderID, e.Seq))
	}
	if diff := cmp.Diff([]string{"o-1#1", "o-1#2", "o-2#1"}, applied); diff != "" {
		t.Errorf("effects in apply order (-want +got):\n%s", diff)
	}

	dead, err := b.subscriber(t, "dlq-reader").Subscribe(context.Background(), dlqTopic)
	must(t, err)
	d := receive(t, dead)
	d.Ack()
	if d.UUID != sent[1].UUID || d.Metadata.Get(consumer.MetadataDeadLetterReason) != "handler" ||
		d.Metadata.Get(consumer.MetadataDeadLetterTopic) != b.topic || d.Metadata.Get(consumer.MetadataDeadLetterAttempts) != "3" {
		t.Errorf("dead letter %s %v", d.UUID, d.Metadata)
	}
}

// TestKafkaNewerVersionIsNotAckedNorLost: a v3 event reaches consumers built
// with v1 and v2; it is nacked and delivered again, never committed, until
// a deployment that knows v3 joins the group and applies it.
func TestKafkaNewerVersionIsNotAckedNorLost(t *testing.T) {
	t.Parallel()
	b := newBroker(t, 1)
	db := prepare(t, nil2sqlite(t))
	drv := driver(t, db)
	onOutcome, res := results()
	old := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "billing", DB: drv, OnOutcome: onOutcome, NackDelay: 10 * time.Millisecond})
	must(t, consumer.Handle(old, drv, writeEffect("billing")))
	newer := paidMessage(t, 3, "o-1", 1)
	must(t, b.publisher(t).Publish(b.topic, newer))

	stop := runRouter(t, old, b.subscriber(t, "billing"), b.topic)
	for range 3 {
		if r := next(t, res); r.Outcome != consumer.OutcomeNacked || r.Reason != consumer.ReasonUnknownVersion || r.MessageUUID != newer.UUID {
			t.Fatalf("old consumer: %+v, want the v3 event nacked", r)
		}
	}
	stop()
	if n := count(t, db, consumer.DefaultTable); n != 0 {
		t.Fatalf("inbox = %d entries, want 0", n)
	}

	onOutcome2, res2 := results()
	upgraded := newConsumer(t, newRegistry(t, 3), consumer.Config{Name: "billing", DB: drv, OnOutcome: onOutcome2})
	must(t, consumer.Handle(upgraded, drv, func(ctx context.Context, tx *gorm.DB, e PaidV3, m consumer.Meta) error {
		return writeEffect("billing")(ctx, tx, e.PaidV2, m)
	}))
	runRouter(t, upgraded, b.subscriber(t, "billing"), b.topic)
	if r := next(t, res2); r.Outcome != consumer.OutcomeApplied || r.MessageUUID != newer.UUID {
		t.Fatalf("upgraded consumer: %+v, want the v3 event applied", r)
	}
	if n := len(effects(t, db)); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}
