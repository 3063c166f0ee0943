package servicebus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gooutbox/outbox/adapters/broker"
)

// TestOpenURL: servicebus:// with a shared access key opens (nothing is
// sent until a publish) and promises order per aggregate through
// sessions; a URL without the key is refused.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	b, err := broker.Open(context.Background(), "servicebus://shop.servicebus.windows.net?key_name=RootManageSharedAccessKey&key=c2VjcmV0", broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if g := b.Guarantees(); !g.OrderPerAggregate || !g.ConsumerGroups || g.Dedup {
		t.Errorf("guarantees = %+v", g)
	}
	for _, u := range []string{"servicebus://shop.servicebus.windows.net", "servicebus://?key_name=a&key=b", "servicebus://shop.servicebus.windows.net?key_name=a&key=b&queue=1"} {
		if _, err := broker.Open(context.Background(), u, broker.Config{}); !errors.Is(err, broker.ErrInvalidURL) {
			t.Errorf("Open(%s) = %v, want ErrInvalidURL", u, err)
		}
	}
}
