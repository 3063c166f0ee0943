package sql_test

import (
	stdSQL "database/sql"
	"os"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/gooutbox/outbox/adapters/sql"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// features are the honest Features of this adapter for Watermill's suite.
var features = tests.Features{
	ForceShort: !runtimetest.Long(), // full sizes in the long tier (runtimetest.EnvLong)
	// Every group reads every message; a group's subscribers take turns on
	// the group's offset row (SELECT ... FOR UPDATE).
	ConsumerGroups: true,
	// At least once: the offset is committed once per batch, so acked
	// messages of an unfinished batch are delivered again after a crash.
	ExactlyOnceDelivery: false,
	// One group reads a topic in offset (commit) order, one message
	// at a time, and its subscribers take turns, so order holds with the
	// suite's 10 competing subscribers.
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: false,
	// Messages are rows: any Publisher or Subscriber on the database sees
	// them.
	Persistent: true,
	// The default constructor puts every subscriber of a test in one group,
	// which continues where the group stopped; the suite's test needs a new
	// group per subscriber (see TestPubSubNewGroups).
	NewSubscriberReceivesOldMessages: false,
	RequireSingleInstance:            false,
	ContextPreserved:                 false,
}

// suiteConstructors returns the suite's constructors; fast replaces the
// subscribers' intervals with short ones (testSubscriberConfig), the
// defaults otherwise.
func suiteConstructors(db *stdSQL.DB, fast bool) (tests.PubSubConstructor, tests.ConsumerGroupPubSubConstructor) {
	withGroup := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		cfg := sql.SubscriberConfig{ConsumerGroup: group}
		if fast {
			cfg = testSubscriberConfig(group)
		}
		return newPublisher(t, db), newSubscriber(t, db, cfg)
	}
	return func(t *testing.T) (message.Publisher, message.Subscriber) {
		return withGroup(t, groupName(t))
	}, withGroup
}

// groupName returns a consumer group name for the suite test t (the same for
// every constructor call of one test).
func groupName(t *testing.T) string {
	name := t.Name()
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	return strings.ReplaceAll(name, "/", "-")
}

// TestPubSub runs Watermill's conformance suite on one fresh schema with
// the subscribers' default settings (SubscriberConfig with only
// ConsumerGroup set), at the suite's short sizes: what a user who copies
// the constructor gets. (go test -count=10 -run 'TestPubSub$' passed 10 runs
// in a row.)
func TestPubSub(t *testing.T) {
	db := newDB(t, 0)
	pubSub, withGroup := suiteConstructors(db, false)
	f := features
	f.ForceShort = true
	tests.TestPubSub(t, f, pubSub, withGroup)
}

// TestPubSubFull runs the suite with short intervals at full sizes in the
// long tier (runtimetest.EnvLong), and at short sizes otherwise. (With the
// default 1 s resend and 30 s ack deadline, the full sizes take longer
// than the long tier allows.)
func TestPubSubFull(t *testing.T) {
	db := newDB(t, 0)
	pubSub, withGroup := suiteConstructors(db, true)
	tests.TestPubSub(t, features, pubSub, withGroup)
}

// TestPubSubNewGroups runs the suite with a new consumer group per
// constructor call, so that TestNewSubscriberReceivesOldMessages runs: a
// subscriber of a new group reads the topic from its first message.
func TestPubSubNewGroups(t *testing.T) {
	db := newDB(t, 0)
	f := features
	f.NewSubscriberReceivesOldMessages = true
	_, withGroup := suiteConstructors(db, false)
	newGroup := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return withGroup(t, "g-"+watermill.NewShortUUID())
	}
	tests.TestNewSubscriberReceivesOldMessages(t, tests.TestContext{TestID: tests.NewTestID(), Features: f}, newGroup)
}

// TestPubSubStress runs the suite several times in parallel
// (STRESS_TEST_COUNT; 2 unless set: 3 took about 50s, 100s under -race, with
// up to about 30 connections at once, so Watermill's default, 10, would need
// about 100, PostgreSQL's default max_connections). It is skipped with
// -short.
func TestPubSubStress(t *testing.T) {
	runtimetest.SkipUnlessLong(t, "Watermill's stress suite")
	if os.Getenv("STRESS_TEST_COUNT") == "" {
		t.Setenv("STRESS_TEST_COUNT", "2")
	}
	db := newDB(t, 0)
	pubSub, withGroup := suiteConstructors(db, true)
	tests.TestPubSubStressTest(t, features, pubSub, withGroup)
}
