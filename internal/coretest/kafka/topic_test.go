package kafka_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/runtime"
)

func TestValidateTopic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
		want string // in the error
	}{
		{"orders", true, ""},
		{"billing.loan_events-v2", true, ""},
		{strings.Repeat("a", 249), true, ""},
		{"", false, "empty"},
		{".", false, `"."`},
		{"..", false, `".."`},
		{"loan events", false, `' ' at byte 4`},
		{"orders/eu", false, `'/' at byte 6`},
		{"caf\u00e9", false, "at byte 3"},
		{strings.Repeat("a", 250), false, "250 characters, at most 249"},
	} {
		err := kafka.ValidateTopic(tc.name)
		if tc.ok {
			if err != nil {
				t.Errorf("ValidateTopic(%q) = %v, want nil", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, kafka.ErrInvalidTopic) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateTopic(%q) = %v, want ErrInvalidTopic saying %q", tc.name, err, tc.want)
		}
	}
}

// TestPublishInvalidTopicIsPermanent: a topic no Kafka accepts fails the
// publish for good, naming it, before any request is sent: the relay parks
// the message instead of retrying it for ever with a hint to create the
// topic (found by a new user with "loan events").
func TestPublishInvalidTopicIsPermanent(t *testing.T) {
	t.Parallel()
	cluster, brokers, _ := startCluster(t)
	counter := countProduces(cluster, "loan events")
	pub := newPublisher(t, kafka.PublisherConfig{Brokers: brokers, AllowAutoTopicCreation: true})
	err := pub.Publish("loan events", newEvent("loan-1", "x"))
	if !errors.Is(err, kafka.ErrInvalidTopic) || !runtime.IsPermanent(err) || !strings.Contains(err.Error(), `"loan events"`) {
		t.Fatalf("Publish to %q = %v, want a permanent error wrapping ErrInvalidTopic naming the topic", "loan events", err)
	}
	if requests, _, _ := counter.counts(); requests != 0 {
		t.Errorf("%d produce requests, want 0", requests)
	}
}

func ExampleValidateTopic() {
	fmt.Println(kafka.ValidateTopic("loans.events"))
	fmt.Println(kafka.ValidateTopic("loan events"))
	// Output:
	// <nil>
	// not a valid Kafka topic name: "loan events" has ' ' at byte 4 (only ASCII letters, digits, '.', '_' and '-')
}
