package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/kafka"
	"github.com/gooutbox/outbox/adapters/kafka/kafkatest"
)

// TestLag: outbox lag reads a group's lag per partition from Kafka, as a
// table with the total or as JSON, and --fail-if-lag-above exits 3 when
// the total is above it; a broker whose adapter cannot tell, and a missing
// group, are usage errors.
func TestLag(t *testing.T) {
	t.Parallel()
	cluster, err := kafkatest.Start(kafkatest.Config{Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	url := "kafka://" + strings.Join(cluster.Addrs(), ",")
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: cluster.Addrs(), AllowAutoTopicCreation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := "orders-" + watermill.NewShortUUID()
	for range 3 {
		if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("{}"))); err != nil {
			t.Fatal(err)
		}
	}

	code, out, stderr := runCmd(t, nil, "lag", "--broker", url, "--group", "billing", "--topic", topic)
	if code != exitOK || !strings.Contains(out, "total lag of group billing: 3") || !strings.Contains(out, topic) {
		t.Fatalf("lag: exit %d:\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCmd(t, nil, "lag", "--json", "--broker", url, "--group", "billing", "--topic", topic)
	var got struct {
		Group      string
		Total      int64
		Partitions []struct {
			Topic          string
			Partition      int
			Committed, Lag int64
		}
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || got.Total != 3 || len(got.Partitions) != 2 ||
		got.Partitions[0].Partition != 0 || got.Partitions[1].Partition != 1 || got.Partitions[0].Committed != -1 {
		t.Errorf("lag --json: exit %d, %v:\n%s%s", code, err, out, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "lag", "--broker", url, "--group", "billing", "--topic", topic, "--fail-if-lag-above", "2"); code != exitAlert || !strings.Contains(stderr, "lags 3 messages behind, more than 2") {
		t.Errorf("--fail-if-lag-above 2: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "lag", "--broker", url, "--group", "billing", "--topic", topic, "--fail-if-lag-above", "3"); code != exitOK {
		t.Errorf("--fail-if-lag-above 3: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "lag", "--broker", url, "--topic", topic); code != exitUsage || !strings.Contains(stderr, "needs --group") {
		t.Errorf("without --group: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCmd(t, nil, "lag", "--broker", "memory://", "--group", "billing"); code != exitUsage || !strings.Contains(stderr, "reports consumer lag") {
		t.Errorf("memory://: exit %d: %s", code, stderr)
	}
}
