// Package sqstest provides an SQS and SNS endpoint for tests, examples and
// demos of package [github.com/gooutbox/outbox/adapters/sqs], without AWS.
//
// [Endpoint] is for tests: it returns the endpoint named by the
// OUTBOX_TEST_SQS_ENDPOINT environment variable when it is set (LocalStack,
// say), and otherwise starts an in-process [Server] that the test's cleanup
// closes. [Start] starts a Server anywhere.
//
// # The in-process server
//
// Server is a fake written for this module. It speaks the protocols of the
// AWS SDK for Go v2 clients this module uses: AWS JSON 1.0 for SQS
// (service/sqs since v1.x of 2024 no longer sends the Query protocol) and
// the Query protocol for SNS. (The goaws emulator, v0.4.5, speaks only the
// Query protocol, so the current SQS client cannot talk to it; its FIFO
// group locking is also not what SQS does.)
//
// It implements, in memory:
//
//   - SQS CreateQueue (FifoQueue, ContentBasedDeduplication,
//     VisibilityTimeout; idempotent, QueueNameExists on other attributes),
//     GetQueueUrl, GetQueueAttributes, SetQueueAttributes, SendMessage,
//     SendMessageBatch (at most 10 entries, 256 KiB in all, distinct ids),
//     ReceiveMessage (long polling, MaxNumberOfMessages,
//     VisibilityTimeout, message and system attribute names), DeleteMessage,
//     ChangeMessageVisibility and PurgeQueue;
//   - FIFO semantics: MessageGroupId required; MessageDeduplicationId (or a
//     content hash with ContentBasedDeduplication) deduplicated for 5
//     minutes, a duplicate reported as sent; messages of a group handed out
//     in send order, none while an earlier one of the group is in flight;
//   - validation: at most 10 attributes, non-empty string values, body
//     characters SQS allows, 256 KiB per message;
//   - SNS CreateTopic (FifoTopic, ContentBasedDeduplication), Subscribe
//     (protocol sqs, RawMessageDelivery), Publish and PublishBatch with FIFO
//     deduplication, delivering to the subscribed queues with the message's
//     group and deduplication ids (raw: body and attributes unchanged;
//     otherwise an SNS JSON notification).
//
// It does not check signatures or policies, keeps no data across restarts,
// has no dead-letter queues, delays, throughput limits or high-throughput
// FIFO mode. [Server.FailEntries] injects per-entry failures into batch
// requests.
package sqstest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// EnvEndpoint names the environment variable that [Endpoint] reads: the URL
// of an SQS and SNS endpoint ("http://127.0.0.1:4566" for LocalStack).
const EnvEndpoint = "OUTBOX_TEST_SQS_ENDPOINT"

// envRequire is the variable that turns an unreachable endpoint into a test
// failure instead of a skip.
const envRequire = "OUTBOX_TEST_REQUIRE_INTEGRATION"

// Endpoint returns an SQS and SNS endpoint URL for t. When
// OUTBOX_TEST_SQS_ENDPOINT ([EnvEndpoint]) is set, it is that endpoint (and
// an unreachable one skips t, or fails it when
// OUTBOX_TEST_REQUIRE_INTEGRATION=1); otherwise Endpoint starts an
// in-process [Server] and registers its Close with t.Cleanup.
func Endpoint(t testing.TB) string {
	t.Helper()
	if env := strings.TrimSpace(os.Getenv(EnvEndpoint)); env != "" {
		if err := reachable(env); err != nil {
			if os.Getenv(envRequire) == "1" {
				t.Fatalf("SQS endpoint at %s is required (%s=1) but unreachable: %v", env, envRequire, err)
			}
			t.Skipf("SQS endpoint at %s unreachable (unset %s to use the in-process fake): %v", env, EnvEndpoint, err)
		}
		return env
	}
	s := NewServer(t)
	return s.URL()
}

// NewServer starts an in-process [Server] for t and registers its Close
// with t.Cleanup. It calls t.Fatal when the server does not start.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// reachable reports whether something answers HTTP at endpoint.
func reachable(endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}

// AWSConfig returns an aws.Config for an emulator: region [Region], static
// dummy credentials, so that nothing reads the environment or contacts an
// instance metadata service. Set the endpoint with ClientConfig.Endpoint.
func AWSConfig() aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
}

// String describes the server.
func (s *Server) String() string { return fmt.Sprintf("sqstest.Server(%s)", s.url) }

// BrokerURL returns a URL for package adapters/broker's Open: scheme ("sqs"
// or "sns") and the host of [Endpoint](t), with create=1 so that queues,
// topics and subscriptions are created on first use: "sqs://127.0.0.1:PORT?create=1".
func BrokerURL(t testing.TB, scheme string) string {
	t.Helper()
	u, err := url.Parse(Endpoint(t))
	if err != nil {
		t.Fatalf("sqstest: endpoint: %v", err)
	}
	return scheme + "://" + u.Host + "?create=1"
}
