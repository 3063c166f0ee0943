package servicebus

import (
	"context"
	"fmt"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers servicebus:// with package adapters/broker.
func init() {
	broker.Register("servicebus", openServiceBus)
}

// NewSDKClient returns a [Client] on a namespace's connection string
// ("Endpoint=sb://NAME.servicebus.windows.net/;SharedAccessKeyName=...;
// SharedAccessKey=..."), and what closes it. Nothing is sent until a
// publish or a subscription.
func NewSDKClient(connectionString string) (Client, func(context.Context) error, error) {
	c, err := azservicebus.NewClientFromConnectionString(connectionString, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: connection string: %w", ErrInvalidConfig, err)
	}
	return SDKClient{C: c}, c.Close, nil
}

// openServiceBus opens servicebus://NAMESPACE.servicebus.windows.net with
// a shared access key. Parameters:
//
//	key_name=NAME  the shared access policy (RootManageSharedAccessKey, say); required
//	key=KEY        its key (URL-encoded); required
//
// A Watermill topic is a Service Bus topic, and a consumer group one of
// its subscriptions: both must exist, and the subscriptions must be
// session-enabled (the subscriber accepts sessions). Duplicate detection,
// when the topic has it on, drops a repeat of an event id within its
// window.
func openServiceBus(_ context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	q, err := broker.Query(u, "key_name", "key")
	if err != nil {
		return nil, err
	}
	if u.Host == "" || q.Get("key_name") == "" || q.Get("key") == "" {
		return nil, fmt.Errorf("%w: servicebus:// needs the namespace's host, key_name and key", broker.ErrInvalidURL)
	}
	client, closeClient, err := NewSDKClient(fmt.Sprintf("Endpoint=sb://%s/;SharedAccessKeyName=%s;SharedAccessKey=%s", u.Host, q.Get("key_name"), q.Get("key")))
	if err != nil {
		return nil, err
	}
	pub, err := NewPublisher(PublisherConfig{Client: client, Logger: bcfg.Logger})
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		Guarantees: broker.Guarantees{OrderPerAggregate: true, Durable: true, SharedAcrossProcesses: true, ConsumerGroups: true},
		Publisher:  pub,
		Subscriber: func(group string) (message.Subscriber, error) {
			return NewSubscriber(SubscriberConfig{Client: client, Subscription: group, Logger: bcfg.Logger})
		},
		Closers: []func() error{func() error { return closeClient(context.Background()) }},
	}), nil
}
