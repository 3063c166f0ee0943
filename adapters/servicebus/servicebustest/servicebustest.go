// Package servicebustest is an in-process fake of the Azure Service Bus
// entities that package [github.com/gooutbox/outbox/adapters/servicebus]
// uses, behind its Client interface: there is no Service Bus emulator for
// these machines, and the SDK's own types cannot be built outside it.
//
// [Namespace] holds session-enabled queues and topics with subscriptions,
// in memory, and follows what the service does for them:
//
//   - a batch is refused whole, with azservicebus.ErrMessageTooLarge from
//     AddMessage, past its size limit (256 KiB by default, the Standard
//     tier's; the size counted is the body, the ids and the application
//     properties' keys and values, plus a fixed overhead per message);
//   - a message without a SessionID is refused by a session-enabled entity;
//   - a message sent to a topic goes to each of its subscriptions;
//   - AcceptNextSession locks a session that has messages and no other
//     holder, and waits for one until its context ends, then returns an
//     *azservicebus.Error with CodeTimeout;
//   - a session's messages are received in the order they were sent;
//     Complete removes a message, Abandon makes it (and it stays first)
//     available again with its DeliveryCount raised, and Close releases the
//     session and every message received but not settled.
//
// A session's lock lasts LockDuration and RenewSessionLock extends it, but
// an expired lock is not taken back. It has no duplicate detection,
// dead-lettering or MaxDeliveryCount, scheduled messages or peeking. [Namespace.FailSends]
// injects failures of whole sends.
package servicebustest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/gooutbox/outbox/adapters/servicebus"
)

// DefaultMaxBatchBytes is a batch's size limit when neither the namespace
// nor the batch options set one: the Standard tier's 256 KiB.
const DefaultMaxBatchBytes = 256 * 1024

// messageOverhead is what a message adds to a batch besides its body, ids
// and properties (the AMQP framing, approximately).
const messageOverhead = 64

// Namespace is an in-process Service Bus namespace. It implements
// servicebus.Client. It is safe for concurrent use.
type Namespace struct {
	// MaxBatchBytes is the size limit of the batches of its senders.
	// Default: DefaultMaxBatchBytes.
	MaxBatchBytes uint64
	// MaxMessageBytes is the size limit of a message sent on its own
	// (SendMessage). Default: DefaultMaxBatchBytes.
	MaxMessageBytes uint64
	// LockDuration is how long a session's lock lasts from its accept or
	// last renewal. Default: 60s (the service's default).
	LockDuration time.Duration

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when messages arrive or are released
	queues   map[string]*entity
	topics   map[string][]string // topic → its subscriptions' entity keys
	failures []error
	seq      int64
	sends    int
	abandons int
	renewals int
}

var _ servicebus.Client = (*Namespace)(nil)

// New returns an empty namespace.
func New() *Namespace {
	return &Namespace{changed: make(chan struct{}), queues: map[string]*entity{}, topics: map[string][]string{}}
}

// entity is a queue or a subscription.
type entity struct {
	sessions map[string]*session
	order    []string // session ids, in the order they first got a message
}

type session struct {
	msgs   []*stored
	locked bool
}

type stored struct {
	m         *azservicebus.ReceivedMessage
	delivered bool // received by the session's holder, not settled
}

// CreateQueue makes a session-enabled queue.
func (n *Namespace) CreateQueue(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.queues[name] = &entity{sessions: map[string]*session{}}
}

// CreateTopic makes a topic with session-enabled subscriptions.
func (n *Namespace) CreateTopic(name string, subscriptions ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range subscriptions {
		key := name + "/" + s
		n.queues[key] = &entity{sessions: map[string]*session{}}
		n.topics[name] = append(n.topics[name], key)
	}
}

// FailSends makes the next len(errs) SendMessageBatch calls fail with errs,
// in order, sending nothing.
func (n *Namespace) FailSends(errs ...error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failures = append(n.failures, errs...)
}

// Sends is how many batches were sent (refused ones not counted).
func (n *Namespace) Sends() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sends
}

// Renewals is how many times receivers renewed a session's lock.
func (n *Namespace) Renewals() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.renewals
}

// Abandons is how many messages receivers abandoned.
func (n *Namespace) Abandons() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.abandons
}

// Pending returns the messages of a queue (or "topic/subscription") not
// completed yet, by session, in order.
func (n *Namespace) Pending(entityName string) map[string][]*azservicebus.ReceivedMessage {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string][]*azservicebus.ReceivedMessage{}
	if e := n.queues[entityName]; e != nil {
		for id, s := range e.sessions {
			for _, st := range s.msgs {
				out[id] = append(out[id], st.m)
			}
		}
	}
	return out
}

// wake tells waiters that messages arrived or were released. The caller
// holds n.mu.
func (n *Namespace) wake() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// notFound is the error for an entity that does not exist.
func notFound() error {
	return &azservicebus.Error{Code: azservicebus.CodeNotFound}
}

// NewSender implements servicebus.Client.
func (n *Namespace) NewSender(queueOrTopic string) (servicebus.Sender, error) {
	return &sender{n: n, entity: queueOrTopic}, nil
}

type sender struct {
	n      *Namespace
	entity string
}

func (s *sender) NewMessageBatch(_ context.Context, options *azservicebus.MessageBatchOptions) (servicebus.Batch, error) {
	max := s.n.MaxBatchBytes
	if max == 0 {
		max = DefaultMaxBatchBytes
	}
	if options != nil && options.MaxBytes != 0 {
		max = options.MaxBytes
	}
	return &batch{max: max}, nil
}

type batch struct {
	max  uint64
	size uint64
	msgs []*azservicebus.Message
}

func size(m *azservicebus.Message) uint64 {
	n := uint64(len(m.Body) + messageOverhead)
	for _, p := range []*string{m.MessageID, m.SessionID, m.Subject, m.ContentType} {
		if p != nil {
			n += uint64(len(*p))
		}
	}
	for k, v := range m.ApplicationProperties {
		n += uint64(len(k) + len(fmt.Sprint(v)))
	}
	return n
}

func (b *batch) AddMessage(m *azservicebus.Message, _ *azservicebus.AddMessageOptions) error {
	n := size(m)
	if b.size+n > b.max {
		return azservicebus.ErrMessageTooLarge
	}
	b.size += n
	b.msgs = append(b.msgs, m)
	return nil
}

func (b *batch) NumMessages() int32 { return int32(len(b.msgs)) }

func (s *sender) SendMessageBatch(ctx context.Context, bt servicebus.Batch, _ *azservicebus.SendMessageBatchOptions) error {
	b, ok := bt.(*batch)
	if !ok {
		return fmt.Errorf("servicebustest: a batch of %T", bt)
	}
	return s.send(ctx, b.msgs)
}

// SendMessage sends one message, refused past MaxMessageBytes as the
// service refuses it (amqp:link:message-size-exceeded).
func (s *sender) SendMessage(ctx context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	max := s.n.MaxMessageBytes
	if max == 0 {
		max = DefaultMaxBatchBytes
	}
	if size(m) > max {
		return fmt.Errorf("servicebustest: *Error{Condition: amqp:link:message-size-exceeded, Description: the message of %d bytes exceeds the limit of %d}", size(m), max)
	}
	return s.send(ctx, []*azservicebus.Message{m})
}

// send enqueues msgs, all or none.
func (s *sender) send(ctx context.Context, msgs []*azservicebus.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.failures) > 0 {
		err := n.failures[0]
		n.failures = n.failures[1:]
		return err
	}
	targets := n.topics[s.entity]
	if targets == nil {
		if n.queues[s.entity] == nil {
			return notFound()
		}
		targets = []string{s.entity}
	}
	for _, m := range msgs {
		if m.SessionID == nil || *m.SessionID == "" {
			return errors.New("servicebustest: the entity requires sessions: a message without a SessionID")
		}
	}
	for _, m := range msgs {
		for _, key := range targets {
			e := n.queues[key]
			sid := *m.SessionID
			sess := e.sessions[sid]
			if sess == nil {
				sess = &session{}
				e.sessions[sid] = sess
				e.order = append(e.order, sid)
			}
			n.seq++
			seq := n.seq
			now := time.Now()
			rm := &azservicebus.ReceivedMessage{
				MessageID:             deref(m.MessageID),
				SessionID:             m.SessionID,
				Subject:               m.Subject,
				ContentType:           m.ContentType,
				Body:                  slices.Clone(m.Body),
				ApplicationProperties: m.ApplicationProperties,
				SequenceNumber:        &seq,
				EnqueuedTime:          &now,
			}
			sess.msgs = append(sess.msgs, &stored{m: rm})
		}
	}
	n.sends++
	n.wake()
	return nil
}

func (s *sender) Close(context.Context) error { return nil }

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// AcceptNextSession implements servicebus.Client.
func (n *Namespace) AcceptNextSession(ctx context.Context, queueOrTopic, subscription string) (servicebus.SessionReceiver, error) {
	key := queueOrTopic
	if subscription != "" {
		key += "/" + subscription
	}
	for {
		n.mu.Lock()
		e := n.queues[key]
		if e == nil {
			n.mu.Unlock()
			return nil, notFound()
		}
		for _, id := range e.order {
			s := e.sessions[id]
			if !s.locked && len(s.msgs) > 0 {
				s.locked = true
				r := &receiver{n: n, s: s, id: id}
				r.until = time.Now().Add(n.lockDuration())
				n.mu.Unlock()
				return r, nil
			}
		}
		changed := n.changed
		n.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, &azservicebus.Error{Code: azservicebus.CodeTimeout}
		}
	}
}

func (n *Namespace) lockDuration() time.Duration {
	if n.LockDuration > 0 {
		return n.LockDuration
	}
	return time.Minute
}

// receiver holds one session's lock.
type receiver struct {
	n      *Namespace
	s      *session
	id     string
	closed bool
	until  time.Time // the lock's expiry (not enforced)
}

func (r *receiver) SessionID() string { return r.id }

func (r *receiver) LockedUntil() time.Time {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	return r.until
}

func (r *receiver) RenewSessionLock(context.Context, *azservicebus.RenewSessionLockOptions) error {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	if r.closed {
		return &azservicebus.Error{Code: azservicebus.CodeLockLost}
	}
	r.until = time.Now().Add(r.n.lockDuration())
	r.n.renewals++
	return nil
}

func (r *receiver) ReceiveMessages(ctx context.Context, max int, _ *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	for {
		r.n.mu.Lock()
		if r.closed {
			r.n.mu.Unlock()
			return nil, &azservicebus.Error{Code: azservicebus.CodeClosed}
		}
		var out []*azservicebus.ReceivedMessage
		for _, st := range r.s.msgs {
			if len(out) == max {
				break
			}
			if st.delivered {
				continue
			}
			st.delivered = true
			st.m.DeliveryCount++
			out = append(out, st.m)
		}
		changed := r.n.changed
		r.n.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *receiver) settle(m *azservicebus.ReceivedMessage, complete bool) error {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	if r.closed {
		return &azservicebus.Error{Code: azservicebus.CodeLockLost}
	}
	for i, st := range r.s.msgs {
		if st.m == m && st.delivered {
			if complete {
				r.s.msgs = slices.Delete(r.s.msgs, i, i+1)
			} else {
				st.delivered = false
				r.n.abandons++
				r.n.wake()
			}
			return nil
		}
	}
	return &azservicebus.Error{Code: azservicebus.CodeLockLost}
}

func (r *receiver) CompleteMessage(_ context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	return r.settle(m, true)
}

func (r *receiver) AbandonMessage(_ context.Context, m *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	return r.settle(m, false)
}

func (r *receiver) Close(context.Context) error {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.s.locked = false
	for _, st := range r.s.msgs {
		st.delivered = false
	}
	r.n.wake()
	return nil
}
