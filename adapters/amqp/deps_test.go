package amqp_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the RabbitMQ client stays out of runtime and of the
// other adapters, and this package does not import them.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := func(pkg string) []string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Skipf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	for _, pkg := range []string{"github.com/gooutbox/outbox/runtime", "github.com/gooutbox/outbox/runtime/relay", "github.com/gooutbox/outbox/adapters/kafka"} {
		for _, d := range deps(pkg) {
			if strings.HasPrefix(d, "github.com/rabbitmq/") || strings.HasPrefix(d, "github.com/ThreeDotsLabs/watermill-amqp") {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
	for _, d := range deps("github.com/gooutbox/outbox/adapters/amqp") {
		if strings.HasPrefix(d, "github.com/gooutbox/outbox/") && d != "github.com/gooutbox/outbox/adapters/amqp" && d != "github.com/gooutbox/outbox/runtime" {
			t.Errorf("adapters/amqp depends on %s", d)
		}
	}
}
