// Package eventbridgetest provides an EventBridge endpoint for tests,
// examples and demos of package
// [github.com/gooutbox/outbox/adapters/eventbridge], without AWS.
//
// [Endpoint] is for tests: it returns the endpoint named by the
// OUTBOX_TEST_EVENTBRIDGE_ENDPOINT environment variable when it is set
// (LocalStack, say), and otherwise starts an in-process [Server] that the
// test's cleanup closes. [Start] starts a Server anywhere.
//
// # The in-process server
//
// Server is a fake written for this module, following the PutEvents API
// reference. It speaks AWS JSON 1.1 (X-Amz-Target: AWSEvents.PutEvents),
// the protocol of the AWS SDK for Go v2's service/eventbridge client, and
// implements PutEvents, in memory:
//
//   - request validation, failing the whole request with
//     ValidationException: 1 to 10 entries, at most 256 KiB in all as
//     EventBridge counts an entry (14 bytes for Time, and the UTF-8 bytes
//     of Source, DetailType, Detail and each Resource);
//   - entry validation, failing only that entry (FailedEntryCount, and its
//     ErrorCode and ErrorMessage in the response, in request order):
//     Source, DetailType and Detail required (InvalidArgument), Detail a
//     JSON object (MalformedDetail), the event bus existing (the default
//     bus, and those made with [Server.CreateEventBus]; otherwise
//     ResourceNotFoundException for the entry);
//   - each accepted entry gets an event id and is kept, with its bus,
//     in [Server.Events].
//
// It has no rules, targets, archives or replays, checks no signatures or
// policies, and keeps nothing across restarts. [Server.FailEntries] makes
// the next entries fail with a given code (ThrottlingException, say).
package eventbridgetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// EnvEndpoint names the environment variable that [Endpoint] reads: the URL
// of an EventBridge endpoint ("http://127.0.0.1:4566" for LocalStack).
const EnvEndpoint = "OUTBOX_TEST_EVENTBRIDGE_ENDPOINT"

// envRequire is the variable that turns an unreachable endpoint into a test
// failure instead of a skip.
const envRequire = "OUTBOX_TEST_REQUIRE_INTEGRATION"

// Endpoint returns an EventBridge endpoint URL for t, and the Server when
// it is the in-process one (nil for an endpoint of EnvEndpoint). When
// OUTBOX_TEST_EVENTBRIDGE_ENDPOINT is set, it is that endpoint (an
// unreachable one skips t, or fails it when
// OUTBOX_TEST_REQUIRE_INTEGRATION=1); otherwise Endpoint starts an
// in-process [Server] and registers its Close with t.Cleanup.
func Endpoint(t testing.TB) (string, *Server) {
	t.Helper()
	if env := strings.TrimSpace(os.Getenv(EnvEndpoint)); env != "" {
		if err := reachable(env); err != nil {
			if os.Getenv(envRequire) == "1" {
				t.Fatalf("EventBridge endpoint at %s is required (%s=1) but unreachable: %v", env, envRequire, err)
			}
			t.Skipf("EventBridge endpoint at %s unreachable (unset %s to use the in-process fake): %v", env, EnvEndpoint, err)
		}
		return env, nil
	}
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s.URL(), s
}

// reachable dials the endpoint's host.
func reachable(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err
	}
	return c.Close()
}

// Start starts an in-process Server on a free loopback port.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("eventbridgetest: listen: %w", err)
	}
	s := newServer()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.url = "http://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}
