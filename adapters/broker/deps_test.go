package broker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// clients lists, per adapter package, the module path prefixes of the broker
// client it is built on.
var clients = map[string][]string{
	"./adapters/kafka":  {"github.com/segmentio/kafka-go"},
	"./adapters/amqp":   {"github.com/rabbitmq/amqp091-go", "github.com/ThreeDotsLabs/watermill-amqp"},
	"./adapters/nats":   {"github.com/nats-io/", "github.com/ThreeDotsLabs/watermill-nats"},
	"./adapters/redis":  {"github.com/redis/go-redis", "github.com/ThreeDotsLabs/watermill-redisstream"},
	"./adapters/sql":    {"github.com/ThreeDotsLabs/watermill-sql"},
	"./adapters/sqs":    {"github.com/aws/"},
	"./adapters/memory": nil,
}

// TestAdaptersCompileOnlyTheirBroker checks that a program importing one
// adapter compiles no other broker's client, and that runtime, hooks, the
// relay and the consumer compile none. It is the one dependency test of the
// adapters: the client lists live here, beside the openers that name them.
func TestAdaptersCompileOnlyTheirBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := []string{"./runtime", "./runtime/relay", "./runtime/consumer", "./hooks", "./adapters/broker"}
	for p := range clients {
		pkgs = append(pkgs, p)
	}
	for _, pkg := range pkgs {
		out, err := exec.Command("go", "list", "-deps", "github.com/gooutbox/outbox/"+strings.TrimPrefix(pkg, "./")).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		for other, prefixes := range clients {
			if other == pkg {
				continue
			}
			for _, prefix := range prefixes {
				for _, d := range deps {
					if strings.HasPrefix(d, prefix) {
						t.Errorf("%s compiles %s, the client of %s", pkg, d, other)
						break
					}
				}
			}
		}
	}
}
