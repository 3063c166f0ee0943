// Package kafkatest provides Kafka brokers for tests, examples and demos of
// package [github.com/gooutbox/outbox/adapters/kafka], without a Kafka
// installation.
//
// [NewCluster] is for tests: it returns the brokers named by the
// OUTBOX_TEST_KAFKA_BROKERS environment variable when it is set, and
// otherwise starts an in-process cluster that the test's cleanup closes.
// [Start] starts an in-process cluster anywhere, for example in a demo's
// main function.
//
// The in-process cluster is franz-go's kfake, a Kafka-protocol broker that
// keeps everything in memory and listens on loopback ports. It accepts
// consumer-group session timeouts down to 100ms, so tests can use short
// heartbeats.
package kafkatest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnvBrokers names the environment variable that [NewCluster] reads: a
// comma-separated list of "host:port" addresses of a real cluster.
const EnvBrokers = "OUTBOX_TEST_KAFKA_BROKERS"

// Config configures an in-process cluster started by [Start]. The zero value
// is valid: every field's zero value means its documented default.
type Config struct {
	// Brokers is the number of brokers.
	//
	// Default: 3.
	Brokers int

	// Partitions is the partition count of topics created without one: by a
	// producer's auto-creation or by CreateTopics with -1 partitions. Topics
	// may always be auto-created.
	//
	// Default: 4.
	Partitions int

	// Options are further kfake options, applied after the ones Config
	// sets (so they win): kfake.SeedTopics, kfake.BrokerConfigs, ...
	Options []kfake.Opt
}

// Cluster is a running in-process Kafka cluster. Close it when done.
type Cluster struct {
	fake *kfake.Cluster
}

// Start starts an in-process cluster configured by cfg. The brokers listen
// on loopback ports chosen by the system; [Cluster.Addrs] lists them.
func Start(cfg Config) (*Cluster, error) {
	if cfg.Brokers == 0 {
		cfg.Brokers = 3
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 4
	}
	if cfg.Brokers < 0 || cfg.Partitions < 0 {
		return nil, fmt.Errorf("kafkatest: invalid config: %d brokers, %d partitions", cfg.Brokers, cfg.Partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(cfg.Brokers),
		kfake.DefaultNumPartitions(cfg.Partitions),
		kfake.AllowAutoTopicCreation(),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
	fake, err := kfake.NewCluster(append(opts, cfg.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: start cluster: %w", err)
	}
	return &Cluster{fake: fake}, nil
}

// Addrs returns the brokers' "host:port" addresses.
func (c *Cluster) Addrs() []string { return c.fake.ListenAddrs() }

// Fake returns the underlying kfake cluster, for fault injection
// (ControlKey, SleepControl, ...) and inspection.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Close shuts the cluster down; its data is gone. It is safe to call more
// than once.
func (c *Cluster) Close() { c.fake.Close() }

// NewCluster returns the addresses of Kafka brokers for t. When
// OUTBOX_TEST_KAFKA_BROKERS ([EnvBrokers]) is set, they are its
// comma-separated entries and nothing is started; otherwise NewCluster
// starts an in-process cluster with the [Config] defaults and registers its
// Close with t.Cleanup. It calls t.Fatal when the cluster does not start.
func NewCluster(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv(EnvBrokers); strings.TrimSpace(env) != "" {
		var addrs []string
		for a := range strings.SplitSeq(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return addrs
	}
	c, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.Addrs()
}

// RefuseProduce returns the response that refuses every partition of a
// produce request with the error code (kerr.NotLeaderForPartition.Code, say),
// for fault tests: return it from a control function of [Cluster.Fake] on
// kmsg.Produce to fail the requests you choose.
func RefuseProduce(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
