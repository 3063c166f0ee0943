package eventbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseb "github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/eventbridge"
	"github.com/gooutbox/outbox/adapters/eventbridge/eventbridgetest"
	"github.com/gooutbox/outbox/runtime"
)

// countingClient counts PutEvents requests and their entries.
type countingClient struct {
	eventbridge.API
	mu       sync.Mutex
	requests []int
	sizes    []int
}

func (c *countingClient) PutEvents(ctx context.Context, in *awseb.PutEventsInput, opts ...func(*awseb.Options)) (*awseb.PutEventsOutput, error) {
	c.mu.Lock()
	c.requests = append(c.requests, len(in.Entries))
	size := 0
	for _, e := range in.Entries {
		size += eventbridge.EntrySize(e)
	}
	c.sizes = append(c.sizes, size)
	c.mu.Unlock()
	return c.API.PutEvents(ctx, in, opts...)
}

// client returns a client of the endpoint, counting its requests.
func client(t *testing.T, endpoint string) *countingClient {
	t.Helper()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
	return &countingClient{API: awseb.NewFromConfig(cfg, func(o *awseb.Options) { o.BaseEndpoint = aws.String(endpoint) })}
}

// fake returns the in-process server, skipping t on a real endpoint
// (OUTBOX_TEST_EVENTBRIDGE_ENDPOINT), whose events a test cannot read.
func fake(t *testing.T) (*eventbridgetest.Server, *countingClient) {
	t.Helper()
	endpoint, srv := eventbridgetest.Endpoint(t)
	if srv == nil {
		t.Skip("reads what the in-process fake received; the endpoint of " + eventbridgetest.EnvEndpoint + " is another")
	}
	return srv, client(t, endpoint)
}

func event(t *testing.T, aggregateID string, payload string) *message.Message {
	t.Helper()
	env := runtime.Envelope{EventID: runtime.NewEventID(), EventType: "orders.order_paid", EventVersion: 2, AggregateType: "order",
		AggregateID: aggregateID, OccurredAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Payload: []byte(payload)}
	m := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
	for k, v := range env.Metadata() {
		m.Metadata.Set(k, v)
	}
	return m
}

func newPublisher(t *testing.T, cfg eventbridge.PublisherConfig) *eventbridge.Publisher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := eventbridge.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPublishMapsTheEvent: an entry's Source is the topic, its DetailType
// the event type, its Time the event's, and its Detail the event's identity
// beside its payload, so that a rule matches on them and a target
// de-duplicates by id.
func TestPublishMapsTheEvent(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	p := newPublisher(t, eventbridge.PublisherConfig{Client: c})
	m := event(t, "42", `{"order_id":"42","amount":"10.00"}`)
	if err := p.Publish("order", m); err != nil {
		t.Fatal(err)
	}
	evs := srv.Events()
	if len(evs) != 1 {
		t.Fatalf("events = %+v, want one", evs)
	}
	e := evs[0]
	if e.EventBus != "default" || e.Source != "order" || e.DetailType != "orders.order_paid" || !e.Time.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("event = %+v", e)
	}
	var d struct {
		ID, Type, AggregateType, AggregateID, Topic string
		Version                                     int
		Metadata                                    map[string]string
		Data                                        map[string]string
	}
	if err := json.Unmarshal([]byte(strings.NewReplacer(`"aggregate_type"`, `"AggregateType"`, `"aggregate_id"`, `"AggregateID"`).Replace(e.Detail)), &d); err != nil {
		t.Fatalf("detail %s: %v", e.Detail, err)
	}
	if d.ID != m.UUID || d.Type != "orders.order_paid" || d.Version != 2 || d.AggregateType != "order" || d.AggregateID != "42" ||
		d.Topic != "order" || d.Data["amount"] != "10.00" || d.Metadata[runtime.MetadataEventID] != m.UUID {
		t.Errorf("detail = %s", e.Detail)
	}
}

// TestPublishBatchesWithinLimits: a Publish call's messages go out in
// requests of at most 10 entries and 256 KiB, in order, and all arrive.
func TestPublishBatchesWithinLimits(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	p := newPublisher(t, eventbridge.PublisherConfig{Client: c})
	var msgs []*message.Message
	for i := range 25 {
		msgs = append(msgs, event(t, "a", `{"n":`+strings.Repeat("1", 1+i%3)+`}`))
	}
	big := `{"blob":"` + strings.Repeat("x", 100<<10) + `"}`
	for range 5 {
		msgs = append(msgs, event(t, "b", big))
	}
	if err := p.Publish("order", msgs...); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	requests, sizes := append([]int(nil), c.requests...), append([]int(nil), c.sizes...)
	c.mu.Unlock()
	total := 0
	for i, n := range requests {
		if n > eventbridge.MaxEntries || sizes[i] >= eventbridge.MaxRequestSize {
			t.Errorf("request %d: %d entries, %d bytes", i, n, sizes[i])
		}
		total += n
	}
	// 25 small entries take 3 requests by count, and 5 of 100 KiB go two
	// at a time at most: 5 requests at least.
	if total != 30 || len(requests) < 5 {
		t.Errorf("requests = %v (bytes %v), want 30 entries in 5 or more", requests, sizes)
	}
	evs := srv.Events()
	if len(evs) != 30 {
		t.Fatalf("%d events arrived, want 30", len(evs))
	}
	for i, e := range evs {
		if !strings.Contains(e.Detail, msgs[i].UUID) {
			t.Fatalf("event %d is not message %d: requests went out of order", i, i)
		}
	}
}

// TestPublishReportsEachEntry: EventBridge's per-entry failures come back
// as runtime.PublishErrors, retryable for throttling or an internal
// failure, permanent for an entry at fault; a message too large is
// refused before sending, alone; the others arrive.
func TestPublishReportsEachEntry(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	p := newPublisher(t, eventbridge.PublisherConfig{Client: c})
	msgs := []*message.Message{
		event(t, "a", `{"n":1}`),
		event(t, "b", `{"n":2}`),
		event(t, "c", `{"n":3}`),
		event(t, "d", `{"blob":"`+strings.Repeat("x", 300<<10)+`"}`),
		event(t, "e", `{"n":5}`),
	}
	srv.FailEntries("ThrottlingException", "MalformedDetail")
	err := p.Publish("order", msgs...)
	var pe runtime.PublishErrors
	if !errors.As(err, &pe) || len(pe) != len(msgs) {
		t.Fatalf("Publish = %v, want PublishErrors of 5", err)
	}
	if !runtime.IsTransient(pe[0]) || runtime.IsPermanent(pe[0]) {
		t.Errorf("throttled entry: %v, want retryable", pe[0])
	}
	if !runtime.IsPermanent(pe[1]) {
		t.Errorf("malformed entry: %v, want permanent", pe[1])
	}
	if pe[2] != nil || pe[4] != nil {
		t.Errorf("accepted entries reported %v, %v", pe[2], pe[4])
	}
	if !runtime.IsPermanent(pe[3]) || !errors.Is(pe[3], eventbridge.ErrMessageTooLarge) {
		t.Errorf("300 KiB entry: %v, want permanent ErrMessageTooLarge", pe[3])
	}
	if evs := srv.Events(); len(evs) != 2 {
		t.Errorf("%d events arrived, want the 2 accepted", len(evs))
	}
}

// TestPublishToAMissingBus: a bus that does not exist fails every entry
// retryably (an operator creates it; nothing is parked).
func TestPublishToAMissingBus(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	p := newPublisher(t, eventbridge.PublisherConfig{Client: c, EventBus: "shop"})
	err := p.Publish("order", event(t, "a", `{}`))
	if err == nil || runtime.IsPermanent(err) || !runtime.IsTransient(err) {
		t.Fatalf("Publish to a missing bus = %v, want a retryable error", err)
	}
	srv.CreateEventBus("shop")
	if err := p.Publish("order", event(t, "a", `{}`)); err != nil {
		t.Fatalf("Publish once the bus exists = %v", err)
	}
	if evs := srv.Events(); len(evs) != 1 || evs[0].EventBus != "shop" {
		t.Errorf("events = %+v", evs)
	}
}

// TestDetailPayload: with DetailPayload, Detail is the payload itself,
// which must be a JSON object.
func TestDetailPayload(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	p := newPublisher(t, eventbridge.PublisherConfig{Client: c, Detail: eventbridge.DetailPayload,
		Source: func(string, *message.Message) string { return "com.example.shop" }})
	err := p.Publish("order", event(t, "a", `{"n":1}`), event(t, "b", `[1,2]`))
	var pe runtime.PublishErrors
	if !errors.As(err, &pe) || pe[0] != nil || !runtime.IsPermanent(pe[1]) {
		t.Fatalf("Publish = %v, want the array refused for good", err)
	}
	if evs := srv.Events(); len(evs) != 1 || evs[0].Detail != `{"n":1}` || evs[0].Source != "com.example.shop" {
		t.Errorf("events = %+v", evs)
	}
}

// TestOpenURL: eventbridge://host:port/bus opens a publisher on an
// emulator's endpoint; its guarantees promise no order and no
// de-duplication, and it has no subscriber.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	endpoint, srv := eventbridgetest.Endpoint(t)
	if srv != nil {
		srv.CreateEventBus("shop")
	}
	host := strings.TrimPrefix(endpoint, "http://")
	b, err := broker.Open(context.Background(), "eventbridge://"+host+"/shop?source=com.example.shop", broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if g := b.Guarantees(); g.OrderPerAggregate || g.Dedup || !g.Durable {
		t.Errorf("guarantees = %+v: want no order, no dedup, durable", g)
	}
	if err := b.Publisher().Publish("order", event(t, "a", `{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if srv != nil {
		if evs := srv.Events(); len(evs) != 1 || evs[0].EventBus != "shop" || evs[0].Source != "com.example.shop" {
			t.Errorf("events = %+v", evs)
		}
	}
	if _, err := b.Subscriber("billing"); !errors.Is(err, eventbridge.ErrNoSubscriber) {
		t.Errorf("Subscriber = %v, want ErrNoSubscriber", err)
	}
	if _, err := broker.Open(context.Background(), "eventbridge://"+host+"/shop?detail=xml", broker.Config{}); !errors.Is(err, broker.ErrInvalidURL) {
		t.Errorf("detail=xml: %v, want ErrInvalidURL", err)
	}
}

// TestPublisherClosed: Publish after Close fails.
func TestPublisherClosed(t *testing.T) {
	t.Parallel()
	_, c := fake(t)
	p := newPublisher(t, eventbridge.PublisherConfig{Client: c})
	p.Close()
	if err := p.Publish("order", event(t, "a", `{}`)); !errors.Is(err, eventbridge.ErrPublisherClosed) {
		t.Errorf("Publish after Close = %v", err)
	}
}
