package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/broker"
	"github.com/gooutbox/outbox/hooks/hookstest"
)

func TestOpenPostgres(t *testing.T) {
	dsn := hookstest.PostgresDSN(t) // a fresh schema, as search_path
	for _, scheme := range []string{"postgres", "postgresql"} {
		t.Run(scheme, func(t *testing.T) {
			u := scheme + "://" + strings.SplitN(dsn, "://", 2)[1]
			b, err := broker.Open(context.Background(), u, broker.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer b.Close()
			want := broker.Guarantees{OrderPerAggregate: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true}
			if got := b.Guarantees(); got != want {
				t.Errorf("Guarantees() = %+v, want %+v", got, want)
			}
			publishAndCheckOrder(t, b, "orders_"+scheme)
		})
	}
}

func TestOpenPostgresBadParameters(t *testing.T) {
	for _, u := range []string{
		"postgres://postgres@127.0.0.1:5432/test?outbox_nope=1",
		"postgresql://postgres@127.0.0.1:5432/test?sslmode=bogus",
	} {
		t.Run(u, func(t *testing.T) {
			b, err := broker.Open(context.Background(), u, broker.Config{})
			if !errors.Is(err, broker.ErrInvalidURL) {
				if b != nil {
					b.Close()
				}
				t.Fatalf("Open(%q) = %v, want ErrInvalidURL", u, err)
			}
		})
	}
}
