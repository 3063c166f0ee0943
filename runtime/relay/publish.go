package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
)

// topicBatch is the part of a claimed batch bound for one topic.
type topicBatch struct {
	topic string
	ids   []int64
	msgs  []*message.Message
}

// publish is the relay's [PublishFunc], minus the error joining: it publishes
// msgs with one Publish call per topic, topics in the order of their first
// message and messages in ID order within a topic. It returns the IDs of the
// messages published, in ID order, and one error per topic that failed.
func (r *Relay) publish(ctx context.Context, msgs []runtime.OutboxMessage) (published []int64, failed []*PublishError) {
	var batches []*topicBatch
	byTopic := make(map[string]*topicBatch)
	for _, m := range msgs {
		b := byTopic[m.Topic]
		if b == nil {
			b = &topicBatch{topic: m.Topic}
			byTopic[m.Topic] = b
			batches = append(batches, b)
		}
		b.ids = append(b.ids, m.ID)
		b.msgs = append(b.msgs, toMessage(ctx, m))
	}

	published = make([]int64, 0, len(msgs))
	for _, b := range batches {
		if err := r.publishTopic(ctx, b.topic, b.msgs); err != nil {
			failed = append(failed, &PublishError{Topic: b.topic, IDs: b.ids, Err: err})
			continue
		}
		published = append(published, b.ids...)
	}
	slices.Sort(published)
	return published, failed
}

// toMessage converts an outbox message to a Watermill message following the
// wire contract: UUID = event id, metadata = [runtime.Envelope.Metadata],
// payload = the event's JSON, context = ctx.
func toMessage(ctx context.Context, m runtime.OutboxMessage) *message.Message {
	wm := message.NewMessage(m.EventID.String(), message.Payload(m.Payload))
	wm.Metadata = m.Metadata()
	wm.SetContext(ctx)
	return wm
}

// publishTopic publishes msgs to topic. It stops waiting, and reports
// ctx's cause, when ctx is done before Publish returns: a publisher that
// ignores message contexts cannot hold the relay past its shutdown timeout.
// The abandoned Publish call may still deliver the messages; they stay
// unmarked and are published again later (at-least-once).
func (r *Relay) publishTopic(ctx context.Context, topic string, msgs []*message.Message) error {
	if topic == "" {
		return errors.New("empty topic")
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- r.pub.Publish(topic, msgs...) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("publish abandoned: %w", context.Cause(ctx))
	}
}

// joinPublishErrors joins failed into one error, or returns nil.
func joinPublishErrors(failed []*PublishError) error {
	if len(failed) == 0 {
		return nil
	}
	errs := make([]error, len(failed))
	for i, f := range failed {
		errs[i] = f
	}
	return errors.Join(errs...)
}
