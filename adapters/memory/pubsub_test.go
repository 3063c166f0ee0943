package memory_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/gooutbox/outbox/adapters/memory"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// waitTimeout bounds every wait for a message in these tests.
const waitTimeout = 15 * time.Second

// features are the honest Features of a memory.PubSub for Watermill's suite.
var features = tests.Features{
	ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
	// No consumer groups: every subscription receives every message.
	ConsumerGroups: false,
	// Within one subscription a message is delivered once, unless it is
	// nacked (TestNoAck checks that an acked message is not sent again). A
	// new subscription receives the topic again, and a message held when a
	// subscription closes goes to the next one: that is at least once across
	// subscriptions. The suite gates on this flag one more test,
	// TestConcurrentClose, which publishes through one instance and reads
	// through another; no in-process PubSub can pass it (gochannel's own
	// Features set this flag to true for the same reason).
	// TestUnackedMessageStaysForNextSubscription checks the behaviour on one
	// instance instead.
	ExactlyOnceDelivery: true,
	// One message in flight per subscription, from a log in publish order.
	GuaranteedOrder: true,
	// Order holds for every subscription, however many.
	GuaranteedOrderWithSingleSubscriber: false,
	// Messages live in one PubSub value: another instance sees none of them.
	Persistent: false,
	// Publisher and subscriber must be the same instance.
	RequireSingleInstance: true,
	// Only within one instance, which the suite's test does not use.
	NewSubscriberReceivesOldMessages: false,
	// Message contexts derive from the Subscribe context.
	ContextPreserved: false,
}

func newPubSub(t *testing.T, cfg memory.Config) *memory.PubSub {
	t.Helper()
	ps, err := memory.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := ps.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ps
}

func constructor(t *testing.T) (message.Publisher, message.Subscriber) {
	ps := newPubSub(t, memory.Config{})
	return ps, ps
}

// TestPubSub runs Watermill's conformance suite.
func TestPubSub(t *testing.T) {
	tests.TestPubSub(t, features, constructor, nil)
}

// TestPubSubStress runs the suite several times in parallel
// (STRESS_TEST_COUNT, default 10). It is skipped with -short.
func TestPubSubStress(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "Watermill's stress suite")
	if os.Getenv("STRESS_TEST_COUNT") == "" {
		t.Setenv("STRESS_TEST_COUNT", "2")
	}
	tests.TestPubSubStressTest(t, features, constructor, nil)
}

// newMessage returns a message of aggregate agg carrying seq.
func newMessage(agg, seq int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("%d", seq)))
	msg.Metadata.Set(runtime.MetadataAggregateID, fmt.Sprintf("agg-%d", agg))
	msg.Metadata.Set("seq", fmt.Sprintf("%d", seq))
	return msg
}

// outbox returns n messages over aggs aggregates, in per-aggregate order,
// interleaved as a relay reads them from a backlog.
func outbox(n, aggs int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = newMessage(i%aggs, i/aggs)
	}
	return msgs
}

// checkOrder receives n messages from ch, acking each, and checks that every
// aggregate's seq metadata counts up from 0 with no gap or repeat.
func checkOrder(t *testing.T, ch <-chan *message.Message, n int) {
	t.Helper()
	next := map[string]int{}
	deadline := time.After(waitTimeout)
	for i := range n {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d of %d messages", i, n)
			}
			agg, seq := msg.Metadata.Get(runtime.MetadataAggregateID), msg.Metadata.Get("seq")
			if want := fmt.Sprintf("%d", next[agg]); seq != want {
				t.Fatalf("message %d: aggregate %s seq %s, want %s", i, agg, seq, want)
			}
			next[agg]++
			msg.Ack()
		case <-deadline:
			t.Fatalf("received %d of %d messages within %s", i, n, waitTimeout)
		}
	}
}

// TestPrefilledOutbox publishes a 5,000-message backlog over 200 aggregates
// as the relay does (sequential Publish calls of batches) before anyone
// subscribes, then subscribes and checks count and per-aggregate order.
// (Watermill's gochannel dropped all of it without Persistent, and reordered
// it with Persistent.)
func TestPrefilledOutbox(t *testing.T) {
	ps := newPubSub(t, memory.Config{})
	const n, aggs, batch = 5000, 200, 100
	msgs := outbox(n, aggs)
	for i := 0; i < n; i += batch {
		if err := ps.Publish("orders", msgs[i:i+batch]...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	ch, err := ps.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	checkOrder(t, ch, n)
	select {
	case msg := <-ch:
		t.Fatalf("extra message %s after %d", msg.UUID, n)
	default:
	}
}

// TestLateSubscriberWhilePublishing has late subscribers join while
// publishing goes on (gochannel's persistent replay raced the live messages
// there): each receives every message, in order.
func TestLateSubscriberWhilePublishing(t *testing.T) {
	ps := newPubSub(t, memory.Config{})
	const n, aggs, batch = 5000, 50, 10
	msgs := outbox(n, aggs)

	published := make(chan int, n/batch)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(published)
		for i := 0; i < n; i += batch {
			if err := ps.Publish("orders", msgs[i:i+batch]...); err != nil {
				t.Errorf("Publish: %v", err)
				return
			}
			published <- i
		}
	}()

	// Subscribe at three points of the publishing: at once, after the first
	// batch, and after about half.
	var subs []<-chan *message.Message
	subscribe := func() {
		ch, err := ps.Subscribe(context.Background(), "orders")
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		subs = append(subs, ch)
	}
	subscribe()
	for i := range published {
		if i == 0 || i == n/2 {
			subscribe()
		}
	}
	wg.Wait()
	for _, ch := range subs {
		checkOrder(t, ch, n)
	}
}

// TestNackRedeliversFirst checks that a nacked message comes again before the
// next one.
func TestNackRedeliversFirst(t *testing.T) {
	ps := newPubSub(t, memory.Config{})
	if err := ps.Publish("t", newMessage(1, 0), newMessage(1, 1)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ch, err := ps.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	first := <-ch
	first.Nack()
	for range 3 {
		again := <-ch
		if again.UUID != first.UUID {
			t.Fatalf("after Nack got %s, want %s again", again.UUID, first.UUID)
		}
		if again.Context().Err() != nil {
			t.Fatalf("redelivered message's context is done: %v", again.Context().Err())
		}
		again.Nack()
	}
	checkOrder(t, ch, 2)
}

// TestUnackedMessageStaysForNextSubscription closes a subscription that holds
// a message and checks that a new subscription receives it.
func TestUnackedMessageStaysForNextSubscription(t *testing.T) {
	ps := newPubSub(t, memory.Config{})
	if err := ps.Publish("t", newMessage(1, 0)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := ps.Subscribe(ctx, "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	held := <-ch
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after its context was canceled")
	}
	ch2, err := ps.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	got := <-ch2
	if got.UUID != held.UUID {
		t.Fatalf("new subscription got %s, want %s", got.UUID, held.UUID)
	}
	got.Ack()
}

// TestTopicFull checks that a bounded topic refuses a whole Publish rather
// than dropping part of it.
func TestTopicFull(t *testing.T) {
	ps := newPubSub(t, memory.Config{MaxMessagesPerTopic: 3})
	if err := ps.Publish("t", newMessage(1, 0), newMessage(1, 1)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	err := ps.Publish("t", newMessage(1, 2), newMessage(1, 3))
	if !errors.Is(err, memory.ErrTopicFull) {
		t.Fatalf("Publish past the bound = %v, want ErrTopicFull", err)
	}
	if runtime.IsPermanent(err) {
		t.Errorf("ErrTopicFull is permanent; it is about the topic, not the message")
	}
	if err := ps.Publish("t", newMessage(1, 2)); err != nil {
		t.Fatalf("Publish up to the bound: %v", err)
	}
	ch, err := ps.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	checkOrder(t, ch, 3)
}

func TestClosed(t *testing.T) {
	ps, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ch, err := ps.Subscribe(context.Background(), "t")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := ps.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, ok := <-ch; ok {
		t.Error("subscription channel open after Close")
	}
	if err := ps.Publish("t", newMessage(1, 0)); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
	if _, err := ps.Subscribe(context.Background(), "t"); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if err := ps.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	if _, err := memory.New(memory.Config{MaxMessagesPerTopic: -1}); !errors.Is(err, memory.ErrInvalidConfig) {
		t.Errorf("New(MaxMessagesPerTopic: -1) = %v, want ErrInvalidConfig", err)
	}
}
