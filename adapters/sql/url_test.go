package sql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/adaptertest"
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
			adaptertest.RoundTrip(t, b, "orders_"+scheme)
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

// TestOpenPostgresServerRefusesURL: what the server refuses whatever the
// retry (a misspelt parameter, which pgx passes on as a server setting, a
// database that does not exist) fails Open with ErrInvalidURL naming it,
// instead of every publish later, retried forever.
func TestOpenPostgresServerRefusesURL(t *testing.T) {
	dsn := hookstest.PostgresDSN(t)
	base, _, _ := strings.Cut(dsn, "?")
	for _, c := range []struct{ url, want string }{
		{dsn + "&statment_timeout=5s", "statment_timeout"},
		{strings.TrimSuffix(base, "/"+lastPathElem(base)) + "/no_such_database_outbox", "no_such_database_outbox"},
	} {
		t.Run(c.want, func(t *testing.T) {
			b, err := broker.Open(context.Background(), c.url, broker.Config{})
			if b != nil {
				b.Close()
			}
			if !errors.Is(err, broker.ErrInvalidURL) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open = %v, want ErrInvalidURL naming %q", err, c.want)
			}
		})
	}
}

// lastPathElem is the database name of a URL without a query.
func lastPathElem(u string) string { return u[strings.LastIndex(u, "/")+1:] }

// TestOpenPostgresUnreachable: a database that cannot be reached at Open is
// not an error (the publisher connects, and retries, when it publishes).
func TestOpenPostgresUnreachable(t *testing.T) {
	b, err := broker.Open(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=1", broker.Config{})
	if err != nil {
		t.Fatalf("Open = %v, want the broker (connected at the first publish)", err)
	}
	b.Close()
}
