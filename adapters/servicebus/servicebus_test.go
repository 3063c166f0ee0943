package servicebus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/servicebus"
	"github.com/gooutbox/outbox/adapters/servicebus/servicebustest"
	"github.com/gooutbox/outbox/runtime"
)

var quiet = slog.New(slog.DiscardHandler)

func event(aggregateID string, n int, payload string) *message.Message {
	env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: "orders.order_paid", EventVersion: 1, AggregateType: "order",
		AggregateID: aggregateID, OccurredAt: time.Now().UTC(), Payload: []byte(payload)}
	m := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
	for k, v := range env.Metadata() {
		m.Metadata.Set(k, v)
	}
	m.Metadata.Set("n", fmt.Sprint(n))
	return m
}

func newPublisher(t *testing.T, ns *servicebustest.Namespace) *servicebus.Publisher {
	t.Helper()
	p, err := servicebus.NewPublisher(servicebus.PublisherConfig{Client: ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPublishMapsTheEvent: the aggregate id is the session id, the event
// id the MessageID, the event type the Subject, the metadata the
// application properties and the payload the body.
func TestPublishMapsTheEvent(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.CreateQueue("orders")
	p := newPublisher(t, ns)
	m := event("42", 1, `{"amount":"10.00"}`)
	if err := p.Publish("orders", m); err != nil {
		t.Fatal(err)
	}
	got := ns.Pending("orders")["42"]
	if len(got) != 1 {
		t.Fatalf("pending = %v, want one message in session 42", ns.Pending("orders"))
	}
	r := got[0]
	if r.MessageID != m.UUID || *r.SessionID != "42" || *r.Subject != "orders.order_paid" || string(r.Body) != `{"amount":"10.00"}` ||
		r.ApplicationProperties[runtime.MetadataEventID] != m.UUID || *r.ContentType != "application/json" {
		t.Errorf("message = %+v", r)
	}
}

// TestPublishBatchesBySize: a Publish call fills the SDK's batches up to
// the size limit and sends them in order.
func TestPublishBatchesBySize(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.MaxBatchBytes = 8 << 10
	ns.CreateQueue("orders")
	p := newPublisher(t, ns)
	var msgs []*message.Message
	for i := range 20 {
		msgs = append(msgs, event("a", i, `{"blob":"`+strings.Repeat("x", 1500)+`"}`))
	}
	if err := p.Publish("orders", msgs...); err != nil {
		t.Fatal(err)
	}
	if n := ns.Sends(); n < 4 {
		t.Errorf("%d sends for 20 messages of 1.5 KiB in 8 KiB batches, want 4 or more", n)
	}
	got := ns.Pending("orders")["a"]
	if len(got) != 20 {
		t.Fatalf("%d messages arrived, want 20", len(got))
	}
	for i, r := range got {
		if r.MessageID != msgs[i].UUID {
			t.Fatalf("message %d is %s, want %s: batches went out of order", i, r.MessageID, msgs[i].UUID)
		}
	}
}

// TestPublishLargerThanABatch: a message larger than a batch may be, but
// within the entity's message limit, is sent on its own, in its place.
func TestPublishLargerThanABatch(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.MaxBatchBytes, ns.MaxMessageBytes = 4<<10, 64<<10
	ns.CreateQueue("orders")
	p := newPublisher(t, ns)
	msgs := []*message.Message{event("a", 0, `{}`), event("a", 1, `{"blob":"`+strings.Repeat("x", 10000)+`"}`), event("a", 2, `{}`)}
	if err := p.Publish("orders", msgs...); err != nil {
		t.Fatal(err)
	}
	got := ns.Pending("orders")["a"]
	if len(got) != 3 || got[0].MessageID != msgs[0].UUID || got[1].MessageID != msgs[1].UUID || got[2].MessageID != msgs[2].UUID {
		t.Errorf("arrived %v, want the three in order", got)
	}
}

// TestPublishFailures: a message too large alone fails for good and holds
// its aggregate's later messages back (retryably); a refused send fails
// its batch and every later message, retryably; the rest arrives.
func TestPublishFailures(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.MaxBatchBytes, ns.MaxMessageBytes = 4<<10, 4<<10
	ns.CreateQueue("orders")
	p := newPublisher(t, ns)
	msgs := []*message.Message{
		event("a", 0, `{}`),
		event("b", 0, `{"blob":"`+strings.Repeat("x", 5000)+`"}`),
		event("b", 1, `{}`),
		event("c", 0, `{}`),
	}
	err := p.Publish("orders", msgs...)
	var pe runtime.PublishErrors
	if !errors.As(err, &pe) || len(pe) != 4 {
		t.Fatalf("Publish = %v, want PublishErrors", err)
	}
	if pe[0] != nil || pe[3] != nil {
		t.Errorf("a and c: %v, %v, want sent", pe[0], pe[3])
	}
	if !runtime.IsPermanent(pe[1]) || !errors.Is(pe[1], servicebus.ErrMessageTooLarge) {
		t.Errorf("b/0 of 5 KB: %v, want permanent ErrMessageTooLarge", pe[1])
	}
	if !runtime.IsTransient(pe[2]) || runtime.IsPermanent(pe[2]) {
		t.Errorf("b/1 behind it: %v, want retryable, not sent", pe[2])
	}
	if n := len(ns.Pending("orders")["b"]); n != 0 {
		t.Errorf("%d messages of b arrived, want none", n)
	}

	ns.FailSends(&azservicebus.Error{Code: azservicebus.CodeConnectionLost})
	err = p.Publish("orders", event("d", 0, `{}`), event("e", 0, `{}`))
	if !errors.As(err, &pe) || !runtime.IsTransient(pe[0]) || !runtime.IsTransient(pe[1]) {
		t.Fatalf("Publish with the connection lost = %v, want both retryable", err)
	}
	if err := p.Publish("orders", event("d", 0, `{}`)); err != nil {
		t.Fatalf("Publish once the connection is back = %v", err)
	}
	if err := p.Publish("missing", event("f", 0, `{}`)); err == nil || !runtime.IsTransient(err) {
		t.Errorf("Publish to a missing entity = %v, want retryable", err)
	}
	if err := p.Publish("orders", event(strings.Repeat("g", 129), 0, `{}`)); !runtime.IsPermanent(err) || !errors.Is(err, servicebus.ErrInvalidSessionID) {
		t.Errorf("Publish with a 129-character aggregate id = %v, want permanent ErrInvalidSessionID", err)
	}
}

// receiveAll reads n messages from ch, acking them, or nacking the first
// delivery of the message whose "n" is nackN on aggregate nackAgg, and
// returns each aggregate's "n" in the order received (nacked ones
// included).
func receiveAll(t *testing.T, ch <-chan *message.Message, n int, nackAgg string, nackN string) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	nacked := false
	deadline := time.After(30 * time.Second)
	for acked := 0; acked < n; {
		select {
		case m := <-ch:
			agg := m.Metadata.Get(runtime.MetadataAggregateID)
			got[agg] = append(got[agg], m.Metadata.Get("n"))
			if !nacked && agg == nackAgg && m.Metadata.Get("n") == nackN {
				nacked = true
				m.Nack()
				continue
			}
			m.Ack()
			acked++
		case <-deadline:
			t.Fatalf("received %v after 30s, want %d acked", got, n)
		}
	}
	return got
}

// TestSubscriberKeepsEachSessionsOrder: the subscriber accepts sessions
// and delivers each aggregate's messages in order, several sessions at a
// time; a nacked message comes again before its session's later ones; an
// acked one is completed.
func TestSubscriberKeepsEachSessionsOrder(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.CreateQueue("orders")
	p := newPublisher(t, ns)
	for i := range 5 {
		for _, agg := range []string{"a", "b", "c"} {
			if err := p.Publish("orders", event(agg, i, `{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sub, err := servicebus.NewSubscriber(servicebus.SubscriberConfig{Client: ns, MaxSessions: 2, ReceiveBatch: 3, SessionIdle: 50 * time.Millisecond,
		NackResendSleep: time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, ch, 15, "b", "2")
	// The nacked message comes again from memory: the session is kept,
	// nothing is abandoned (each abandon would raise a delivery count
	// towards the entity's dead-letter queue).
	if n := ns.Abandons(); n != 0 {
		t.Errorf("%d messages abandoned after a nack, want none", n)
	}
	want := map[string]string{"a": "0 1 2 3 4", "b": "0 1 2 2 3 4", "c": "0 1 2 3 4"}
	for agg, w := range want {
		if g := strings.Join(got[agg], " "); g != w {
			t.Errorf("aggregate %s received %s, want %s", agg, g, w)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(ns.Pending("orders")) > 0 && len(ns.Pending("orders")["a"])+len(ns.Pending("orders")["b"])+len(ns.Pending("orders")["c"]) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pending after every ack: %v", ns.Pending("orders"))
		}
		time.Sleep(10 * time.Millisecond) // polling until the deadline
	}
}

// TestSubscriptionsAreConsumerGroups: each subscription of a topic gets
// every message.
func TestSubscriptionsAreConsumerGroups(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.CreateTopic("orders", "billing", "shipping")
	p := newPublisher(t, ns)
	for i := range 3 {
		if err := p.Publish("orders", event("a", i, `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, group := range []string{"billing", "shipping"} {
		sub, err := servicebus.NewSubscriber(servicebus.SubscriberConfig{Client: ns, Subscription: group, SessionIdle: 50 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := sub.Subscribe(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(receiveAll(t, ch, 3, "", "")["a"], " "); got != "0 1 2" {
			t.Errorf("group %s received %s, want 0 1 2", group, got)
		}
		sub.Close()
	}
}

// TestConfigs: a missing client is refused.
func TestConfigs(t *testing.T) {
	t.Parallel()
	if _, err := servicebus.NewPublisher(servicebus.PublisherConfig{}); !errors.Is(err, servicebus.ErrInvalidConfig) {
		t.Errorf("NewPublisher without a client = %v", err)
	}
	if _, err := servicebus.NewSubscriber(servicebus.SubscriberConfig{}); !errors.Is(err, servicebus.ErrInvalidConfig) {
		t.Errorf("NewSubscriber without a client = %v", err)
	}
}

// TestSubscriberRenewsTheSessionLock: a session held longer than its lock
// lasts is renewed, and its messages are still completed.
func TestSubscriberRenewsTheSessionLock(t *testing.T) {
	t.Parallel()
	ns := servicebustest.New()
	ns.LockDuration = 200 * time.Millisecond
	ns.CreateQueue("orders")
	p := newPublisher(t, ns)
	if err := p.Publish("orders", event("a", 0, `{}`), event("a", 1, `{}`)); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	sub, err := servicebus.NewSubscriber(servicebus.SubscriberConfig{Client: ns, SessionIdle: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	// Hold the message past two lock durations: only renewals keep the
	// session this subscriber's.
	held := time.After(500 * time.Millisecond)
	<-held
	first.Ack()
	second := <-ch
	second.Ack()
	deadline := time.Now().Add(10 * time.Second)
	for len(ns.Pending("orders")["a"]) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pending after both acks: %v", ns.Pending("orders"))
		}
		time.Sleep(10 * time.Millisecond) // polling until the deadline
	}
	if ns.Renewals() < 2 {
		t.Errorf("%d lock renewals while a message was held 2.5 lock durations, want 2 or more", ns.Renewals())
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
