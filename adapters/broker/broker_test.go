package broker_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/gooutbox/outbox/adapters/broker"
)

// registered registers the scheme "testmem", a gochannel pub/sub, once per
// test binary.
var registered = func() bool {
	broker.Register("TestMem", func(_ context.Context, u *url.URL, cfg broker.Config) (*broker.Broker, error) {
		if _, err := broker.Query(u, "size"); err != nil {
			return nil, err
		}
		if cfg.Logger == nil {
			return nil, errors.New("opener got a nil logger")
		}
		ps := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, nil)
		return broker.New(broker.Parts{
			Guarantees: broker.Guarantees{OrderPerAggregate: true},
			Publisher:  ps,
			Subscriber: func(string) (message.Subscriber, error) { return ps, nil },
		}), nil
	})
	return true
}()

// TestOpenRegisteredScheme: a scheme registered (in any case) opens through
// Open, which passes a logger and names the scheme in lower case.
func TestOpenRegisteredScheme(t *testing.T) {
	b, err := broker.Open(context.Background(), "TESTMEM://", broker.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if b.Scheme() != "testmem" || !b.Guarantees().OrderPerAggregate {
		t.Errorf("Scheme, Guarantees = %q, %+v; want testmem and the opener's", b.Scheme(), b.Guarantees())
	}
	if !slices.Contains(broker.Schemes(), "testmem") {
		t.Errorf("Schemes() = %v, want testmem among them", broker.Schemes())
	}
}

// TestOpenUnregisteredSchemeNamesTheImport: a scheme of an adapter this
// program does not import is an ErrUnknownScheme naming the package whose
// import registers it (this test binary imports no adapter); an unknown one
// lists the schemes registered.
func TestOpenUnregisteredSchemeNamesTheImport(t *testing.T) {
	for scheme, pkg := range map[string]string{
		"nats":     "github.com/gooutbox/outbox/adapters/nats",
		"kafka":    "github.com/gooutbox/outbox/adapters/kafka",
		"sns":      "github.com/gooutbox/outbox/adapters/sqs",
		"postgres": "github.com/gooutbox/outbox/adapters/sql",
	} {
		_, err := broker.Open(context.Background(), scheme+"://user:secret@host:1", broker.Config{})
		if !errors.Is(err, broker.ErrUnknownScheme) {
			t.Fatalf("Open(%s://) = %v, want ErrUnknownScheme", scheme, err)
		}
		if want := `import _ "` + pkg + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s://) = %q, want it to say %s", scheme, err, want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s://) = %q shows the password", scheme, err)
		}
	}
	_, err := broker.Open(context.Background(), "carrier-pigeon://loft", broker.Config{})
	if !errors.Is(err, broker.ErrUnknownScheme) || !strings.Contains(err.Error(), "registered: testmem") {
		t.Errorf("Open(carrier-pigeon://) = %v, want ErrUnknownScheme listing testmem", err)
	}
}

// TestQueryRejectsUnknownParameters: an opener's Query names a parameter
// it does not take, wrapping ErrInvalidURL, so a typo never falls back to
// a default.
func TestQueryRejectsUnknownParameters(t *testing.T) {
	_, err := broker.Open(context.Background(), "testmem://?sise=3", broker.Config{})
	if !errors.Is(err, broker.ErrInvalidURL) || !strings.Contains(err.Error(), `"sise"`) || !strings.Contains(err.Error(), "known: size") {
		t.Errorf("Open with a misspelt parameter = %v, want ErrInvalidURL naming it and the known ones", err)
	}
}

// TestRegisterTwicePanics: registering a scheme twice is a programming
// error, as with database/sql.Register.
func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Register of a scheme registered already did not panic")
		}
	}()
	broker.Register("testmem", func(context.Context, *url.URL, broker.Config) (*broker.Broker, error) { return nil, nil })
}
