package servicebus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// Batch is the part of *azservicebus.MessageBatch the publisher uses: a
// batch that refuses, with azservicebus.ErrMessageTooLarge, a message that
// would take it past the entity's size limit.
type Batch interface {
	AddMessage(m *azservicebus.Message, options *azservicebus.AddMessageOptions) error
	NumMessages() int32
}

// Sender sends batches to one queue or topic: what [Publisher] needs of an
// *azservicebus.Sender ([SDKClient] wraps one). A fake implements it in
// tests (package servicebustest).
type Sender interface {
	NewMessageBatch(ctx context.Context, options *azservicebus.MessageBatchOptions) (Batch, error)
	// SendMessage sends one message on its own: for one larger than the
	// link's batch limit (1 MB on Premium) but within the entity's
	// message limit.
	SendMessage(ctx context.Context, message *azservicebus.Message, options *azservicebus.SendMessageOptions) error
	SendMessageBatch(ctx context.Context, batch Batch, options *azservicebus.SendMessageBatchOptions) error
	Close(ctx context.Context) error
}

// SessionReceiver is what [Subscriber] needs of an
// *azservicebus.SessionReceiver, which implements it.
type SessionReceiver interface {
	SessionID() string
	// LockedUntil is when the session's lock expires unless renewed.
	LockedUntil() time.Time
	// RenewSessionLock extends it.
	RenewSessionLock(ctx context.Context, options *azservicebus.RenewSessionLockOptions) error
	ReceiveMessages(ctx context.Context, maxMessages int, options *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, message *azservicebus.ReceivedMessage, options *azservicebus.AbandonMessageOptions) error
	Close(ctx context.Context) error
}

var _ SessionReceiver = (*azservicebus.SessionReceiver)(nil)

// Client opens senders and accepts sessions: what this package needs of an
// *azservicebus.Client ([SDKClient] wraps one).
type Client interface {
	// NewSender returns a sender to a queue or topic.
	NewSender(queueOrTopic string) (Sender, error)
	// AcceptNextSession locks the next session with messages of a queue
	// (subscription "") or of a topic's subscription, waiting for one
	// until ctx ends or the service's timeout (an *azservicebus.Error
	// with CodeTimeout).
	AcceptNextSession(ctx context.Context, queueOrTopic, subscription string) (SessionReceiver, error)
}

// SDKClient is a [Client] on the Azure SDK's client.
type SDKClient struct{ C *azservicebus.Client }

// NewSender implements [Client].
func (c SDKClient) NewSender(queueOrTopic string) (Sender, error) {
	s, err := c.C.NewSender(queueOrTopic, nil)
	if err != nil {
		return nil, err
	}
	return sdkSender{s}, nil
}

// AcceptNextSession implements [Client].
func (c SDKClient) AcceptNextSession(ctx context.Context, queueOrTopic, subscription string) (SessionReceiver, error) {
	if subscription == "" {
		return c.C.AcceptNextSessionForQueue(ctx, queueOrTopic, nil)
	}
	return c.C.AcceptNextSessionForSubscription(ctx, queueOrTopic, subscription, nil)
}

type sdkSender struct{ s *azservicebus.Sender }

func (s sdkSender) NewMessageBatch(ctx context.Context, options *azservicebus.MessageBatchOptions) (Batch, error) {
	return s.s.NewMessageBatch(ctx, options)
}

func (s sdkSender) SendMessageBatch(ctx context.Context, batch Batch, options *azservicebus.SendMessageBatchOptions) error {
	b, ok := batch.(*azservicebus.MessageBatch)
	if !ok {
		return fmt.Errorf("servicebus: a batch of %T, not of this sender", batch)
	}
	return s.s.SendMessageBatch(ctx, b, options)
}

func (s sdkSender) SendMessage(ctx context.Context, m *azservicebus.Message, options *azservicebus.SendMessageOptions) error {
	return s.s.SendMessage(ctx, m, options)
}

func (s sdkSender) Close(ctx context.Context) error { return s.s.Close(ctx) }

// code returns the Service Bus error code in err's tree, "" when none.
func code(err error) azservicebus.Code {
	var e *azservicebus.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
