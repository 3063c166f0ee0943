package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
	"github.com/gooutbox/outbox/runtime"
)

// TestOpenSQSAndSNS opens sqs:// and sns:// against the test endpoint,
// publishes messages of two aggregates and reads them back in order through
// Subscriber("g1").
func TestOpenSQSAndSNS(t *testing.T) {
	t.Parallel()
	endpoint := sqstest.Endpoint(t)
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{"sqs", "sns"} {
		t.Run(scheme, func(t *testing.T) {
			b, err := broker.Open(context.Background(), scheme+"://"+u.Host+"?create=1&region=us-east-1", broker.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer b.Close()
			if g := b.Guarantees(); !g.OrderPerAggregate || !g.Dedup || !g.Durable || !g.SharedAcrossProcesses {
				t.Errorf("Guarantees() = %+v, want all true", g)
			}
			topic := "broker-" + watermill.NewShortUUID()
			sub, err := b.Subscriber("g1")
			if err != nil {
				t.Fatalf("Subscriber: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Subscribe before publishing: an SNS group's queue gets only
			// what is published after its subscription exists.
			ch, err := sub.Subscribe(ctx, topic)
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			var msgs []*message.Message
			for seq := range 5 {
				for _, agg := range []string{"a", "b"} {
					m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"seq":%d}`, seq)))
					m.Metadata.Set(runtime.MetadataAggregateID, agg)
					m.Metadata.Set("seq", fmt.Sprint(seq))
					msgs = append(msgs, m)
				}
			}
			if err := b.Publisher().Publish(topic, msgs...); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			next := map[string]int{}
			for range msgs {
				select {
				case m := <-ch:
					agg := m.Metadata.Get(runtime.MetadataAggregateID)
					if m.Metadata.Get("seq") != fmt.Sprint(next[agg]) {
						t.Fatalf("aggregate %s: seq %s, want %d", agg, m.Metadata.Get("seq"), next[agg])
					}
					next[agg]++
					m.Ack()
				case <-time.After(15 * time.Second):
					t.Fatalf("received %v, want 5 of each aggregate", next)
				}
			}
		})
	}
}

// TestOpenSQSDefaultChain: sqs:// without a host is AWS itself, through
// the default credential chain; opening it contacts nothing.
func TestOpenSQSDefaultChain(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(context.Background(), "sqs://?region=eu-west-1", broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenSQSInvalidURL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"sqs://127.0.0.1:1?bogus=1",
		"sqs://127.0.0.1:1?create=maybe",
		"sqs://127.0.0.1:1?wait=0s",
		"sqs://127.0.0.1:1?wait=21s",
		"sns://127.0.0.1:1?wait=1500ms",
		"sqs://127.0.0.1:1?wait=soon",
		"sqs://127.0.0.1:1/path",
		"sns://127.0.0.1:1?queue=x",
		"sqs://key:secret@?region=eu-west-1",
	} {
		_, err := broker.Open(context.Background(), raw, broker.Config{})
		if !errors.Is(err, broker.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", raw, err)
		}
	}
}

// TestOpenWaitParameter: wait=2s is the subscribers' long-polling wait
// (SubscriberConfig.WaitTime): their ReceiveMessage calls, seen on the way
// to the fake, ask for WaitTimeSeconds 2; without it, for the default 20.
func TestOpenWaitParameter(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(sqstest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	waits := map[int]bool{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var in struct{ WaitTimeSeconds int }
			if json.Unmarshal(body, &in) == nil {
				mu.Lock()
				waits[in.WaitTimeSeconds] = true
				mu.Unlock()
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()
	for _, tc := range []struct {
		query string
		want  int
	}{{"&wait=2s", 2}, {"", 20}} {
		b, err := broker.Open(context.Background(), "sqs://"+host+"?create=1"+tc.query, broker.Config{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		sub, err := b.Subscriber("g")
		if err != nil {
			t.Fatal(err)
		}
		topic := "wait-" + watermill.NewShortUUID()
		// A message delivered proves a receive was made.
		if _, err := sub.Subscribe(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
		m := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
		m.Metadata.Set(runtime.MetadataAggregateID, "a")
		if err := b.Publisher().Publish(topic, m); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			mu.Lock()
			seen := waits[tc.want]
			mu.Unlock()
			if seen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("query %q: no ReceiveMessage with WaitTimeSeconds %d within 10s (seen %v)", tc.query, tc.want, waits)
			}
			time.Sleep(10 * time.Millisecond) // polling the proxy's record
		}
		if tc.want == 2 {
			mu.Lock()
			other := waits[20]
			mu.Unlock()
			if other {
				t.Fatalf("wait=2s: a ReceiveMessage asked for WaitTimeSeconds 20 (seen %v)", waits)
			}
			// The default subscriber's Close waits out its 20-s poll:
			// close only the short one here, the other at cleanup.
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Cleanup(func() { b.Close() })
		}
	}
}
