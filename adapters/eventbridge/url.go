package eventbridge

import (
	"context"
	"fmt"
	"net/url"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/gooutbox/outbox/adapters/broker"
)

// init registers eventbridge:// with package adapters/broker.
func init() {
	broker.Register("eventbridge", openEventBridge)
}

// openEventBridge opens eventbridge://[host:port]/[bus]. The path is the
// event bus's name (default: "default"). With a host, the endpoint is
// http://host:port (an emulator: LocalStack, adapters/eventbridge/eventbridgetest)
// and the credentials are dummies unless the URL carries user:password;
// without one, it is AWS itself, with the region and credentials of the
// AWS SDK's default chain. Parameters:
//
//	region=NAME   AWS region (default: the default chain's; us-east-1 with a host)
//	source=NAME   every entry's Source (default: the topic)
//	detail=MODE   envelope (default) or payload (PublisherConfig.Detail)
//
// The broker publishes only: EventBridge delivers through rules to
// targets, so its Subscriber returns ErrNoSubscriber.
func openEventBridge(ctx context.Context, u *url.URL, bcfg broker.Config) (*broker.Broker, error) {
	q, err := broker.Query(u, "region", "source", "detail")
	if err != nil {
		return nil, err
	}
	cfg := PublisherConfig{Region: q.Get("region"), Logger: bcfg.Logger}
	if bus := trimSlash(u.Path); bus != "" {
		cfg.EventBus = bus
	}
	if s := q.Get("source"); s != "" {
		cfg.Source = func(string, *message.Message) string { return s }
	}
	switch d := q.Get("detail"); d {
	case "", "envelope":
	case "payload":
		cfg.Detail = DetailPayload
	default:
		return nil, fmt.Errorf("%w: detail=%q: want envelope or payload", broker.ErrInvalidURL, d)
	}
	if u.Host != "" {
		cfg.Endpoint = "http://" + u.Host
		user, pass := "test", "test"
		if u.User != nil {
			user = u.User.Username()
			pass, _ = u.User.Password()
		}
		awsCfg := aws.Config{Credentials: credentials.NewStaticCredentialsProvider(user, pass, "")}
		cfg.AWSConfig = &awsCfg
	}
	pub, err := NewPublisher(cfg)
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Parts{
		// No order (not even within a request) and no de-duplication;
		// EventBridge stores an accepted event durably.
		Guarantees: broker.Guarantees{Durable: true, SharedAcrossProcesses: true},
		Publisher:  pub,
		Subscriber: func(string) (message.Subscriber, error) { return nil, ErrNoSubscriber },
	}), nil
}

func trimSlash(p string) string {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}
