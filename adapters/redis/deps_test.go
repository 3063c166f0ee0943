package redis_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies checks that the Redis client stays out of runtime, hooks
// and the other adapters, and that this package compiles no other broker's
// client.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := func(pkg string) string {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return string(out)
	}
	for _, pkg := range []string{"github.com/gooutbox/outbox/runtime", "github.com/gooutbox/outbox/hooks", "github.com/gooutbox/outbox/adapters/kafka"} {
		if strings.Contains(deps(pkg), "github.com/redis/go-redis") {
			t.Errorf("%s depends on the Redis client", pkg)
		}
	}
	own := deps("github.com/gooutbox/outbox/adapters/redis")
	for _, other := range []string{"github.com/segmentio/kafka-go", "github.com/nats-io/", "github.com/rabbitmq/", "gorm.io/"} {
		if strings.Contains(own, other) {
			t.Errorf("adapters/redis depends on %s", other)
		}
	}
}
