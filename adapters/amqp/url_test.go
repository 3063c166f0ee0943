package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/adapters/amqp"
	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/runtime"
)

// TestOpenAMQP opens RabbitMQ by URL, publishes for two aggregates before any
// subscriber exists, and reads them back in order through Subscriber("g1"),
// in both modes.
func TestOpenAMQP(t *testing.T) {
	base := brokerURL(t)
	for _, tc := range []struct{ name, query string }{
		{"queue", ""},
		{"pubsub", "?mode=pubsub&groups=g1"},
		{"quorum", "?quorum=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := broker.Open(context.Background(), base+tc.query, broker.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer b.Close()
			if b.Scheme() != "amqp" {
				t.Errorf("Scheme() = %q", b.Scheme())
			}
			g := b.Guarantees()
			if !g.Durable || g.Dedup || !g.SharedAcrossProcesses || g.OrderPerAggregate != (tc.name != "quorum") || g.ConsumerGroups != (tc.name == "pubsub") {
				t.Errorf("Guarantees() = %+v", g)
			}
			topic := newTopic(t, base, "g1")

			var msgs []*message.Message
			want := map[string][]string{}
			for i := range 10 {
				agg := fmt.Sprintf("agg-%d", i%2)
				msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"n":%d}`, i)))
				msg.Metadata.Set(runtime.MetadataAggregateID, agg)
				msgs = append(msgs, msg)
				want[agg] = append(want[agg], msg.UUID)
			}
			if err := b.Publisher().Publish(topic, msgs...); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			sub, err := b.Subscriber("g1")
			if err != nil {
				t.Fatalf("Subscriber: %v", err)
			}
			ch, err := sub.Subscribe(context.Background(), topic)
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			got := map[string][]string{}
			seen := map[string]bool{}
			timeout := time.After(20 * time.Second)
			for len(seen) < len(msgs) {
				select {
				case m := <-ch:
					if !seen[m.UUID] {
						seen[m.UUID] = true
						agg := m.Metadata.Get(runtime.MetadataAggregateID)
						got[agg] = append(got[agg], m.UUID)
					}
					m.Ack()
				case <-timeout:
					t.Fatalf("received %d of %d messages", len(seen), len(msgs))
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("order per aggregate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOpenAMQPBadParameters: unknown or invalid parameters are rejected
// before anything is dialled.
func TestOpenAMQPBadParameters(t *testing.T) {
	for _, u := range []string{
		"amqp://guest:guest@127.0.0.1:5672/?mdoe=pubsub",
		"amqp://guest:guest@127.0.0.1:5672/?mode=topic",
		"amqp://guest:guest@127.0.0.1:5672/?quorum=yes",
		"amqp://guest:guest@127.0.0.1:5672/?groups=a,b",
		"amqp://guest:guest@127.0.0.1:5672/?mode=pubsub&groups=a,,b",
		"amqps:///vhost",
	} {
		if _, err := broker.Open(context.Background(), u, broker.Config{}); !errors.Is(err, broker.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", u, err)
		}
	}
}

// TestOpenAMQPServerRefusesURL: a password or vhost RabbitMQ refuses is
// ErrInvalidURL at Open, naming the refusal without the password (every
// publish failed with it, retried forever: a new user's trial); a broker
// that cannot be reached is no error at Open (the publisher dials when it
// publishes).
func TestOpenAMQPServerRefusesURL(t *testing.T) {
	base := brokerURL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	badPassword := *u
	badPassword.User = url.UserPassword(u.User.Username(), "not-the-password-7x")
	noVhost := *u
	noVhost.Path = "/no_such_vhost_outbox"
	for _, c := range []struct{ url, want string }{
		{badPassword.String(), "username or password not allowed"},
		{noVhost.String(), "vhost"},
	} {
		b, err := broker.Open(context.Background(), c.url, broker.Config{})
		if b != nil {
			b.Close()
		}
		if !errors.Is(err, broker.ErrInvalidURL) || !errors.Is(err, amqp.ErrAccessRefused) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "not-the-password-7x") {
			t.Errorf("Open(%s) = %v, want ErrInvalidURL and amqp.ErrAccessRefused saying %q, without the password", c.url, err, c.want)
		}
	}
	b, err := broker.Open(context.Background(), "amqp://guest:guest@127.0.0.1:1/", broker.Config{})
	if err != nil {
		t.Fatalf("Open of an unreachable broker = %v, want the broker (dialled at the first publish)", err)
	}
	b.Close()
}
