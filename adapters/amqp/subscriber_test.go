package amqp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/runtime"
)

// TestOrderAcrossNacks: a handler that nacks every third delivery once gets
// every message; with a classic queue (the default) it sees each aggregate's
// events in publish order (by first ack). A quorum queue (RabbitMQ 3.10
// here) redelivers a nacked message after later ones, as Config.Quorum
// documents; the test checks that it still loses nothing.
func TestOrderAcrossNacks(t *testing.T) {
	for _, quorum := range []bool{false, true} {
		name := "classic"
		if quorum {
			name = "quorum"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Quorum = quorum
			topic := newTopic(t, cfg.URL)
			msgs, want := events(300, 5)
			publishInBatches(t, newPublisher(t, cfg), topic, msgs, 100)

			ch, err := newSubscriber(t, cfg).Subscribe(context.Background(), topic)
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			got := map[string][]string{}
			acked := map[string]bool{}
			nacked := map[string]bool{}
			deliveries := 0
			deadline := time.After(waitTimeout)
			for len(acked) < len(msgs) {
				select {
				case msg := <-ch:
					deliveries++
					if deliveries%3 == 0 && !nacked[msg.UUID] {
						nacked[msg.UUID] = true
						msg.Nack()
						continue
					}
					if !acked[msg.UUID] {
						acked[msg.UUID] = true
						agg := msg.Metadata.Get(runtime.MetadataAggregateID)
						got[agg] = append(got[agg], msg.UUID)
					}
					msg.Ack()
				case <-deadline:
					t.Fatalf("acked %d of %d messages", len(acked), len(msgs))
				}
			}
			if len(nacked) == 0 {
				t.Fatal("no message was nacked")
			}
			diff := cmp.Diff(want, got)
			switch {
			case !quorum && diff != "":
				t.Errorf("order of first acks per aggregate (-want +got):\n%s", diff)
			case quorum && diff == "":
				t.Log("the quorum queue kept the order across nacks")
			case quorum:
				t.Log("the quorum queue redelivered nacked messages after later ones, as documented")
			}
		})
	}
}

// TestSingleActiveConsumerFailover: three subscribers of one queue; the one
// RabbitMQ delivers to is closed mid-stream, with a message unacked; another
// takes over, and the events of every aggregate are acked in publish order.
func TestSingleActiveConsumerFailover(t *testing.T) {
	cfg := testConfig(t)
	topic := newTopic(t, cfg.URL)
	msgs, want := events(600, 6)
	publishInBatches(t, newPublisher(t, cfg), topic, msgs, 200)

	type delivery struct {
		sub int
		msg *message.Message
	}
	out := make(chan delivery)
	subs := make([]*amqp.Subscriber, 3)
	var wg sync.WaitGroup
	for i := range subs {
		subs[i] = newSubscriber(t, cfg)
		ch, err := subs[i].Subscribe(context.Background(), topic)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		wg.Go(func() {
			for msg := range ch {
				out <- delivery{i, msg}
			}
		})
	}

	got := map[string][]string{}
	acked := map[string]bool{}
	active := map[int]bool{}
	closed := -1
	deadline := time.After(waitTimeout)
	for len(acked) < len(msgs) {
		select {
		case d := <-out:
			active[d.sub] = true
			if closed < 0 && len(acked) == len(msgs)/2 {
				// Close the active subscriber with this message unacked:
				// the broker requeues it for the next consumer.
				closed = d.sub
				go func() { _ = subs[d.sub].Close() }()
				continue
			}
			if !acked[d.msg.UUID] {
				acked[d.msg.UUID] = true
				agg := d.msg.Metadata.Get(runtime.MetadataAggregateID)
				got[agg] = append(got[agg], d.msg.UUID)
			}
			d.msg.Ack()
		case <-deadline:
			t.Fatalf("acked %d of %d messages (subscribers that delivered: %v)", len(acked), len(msgs), active)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order of first acks per aggregate (-want +got):\n%s", diff)
	}
	if len(active) != 2 {
		t.Errorf("%d subscribers delivered, want 2 (the first active one, then one standby)", len(active))
	}
	for _, s := range subs {
		_ = s.Close()
	}
	go func() {
		for range out {
		}
	}()
	wg.Wait()
	close(out)
}
