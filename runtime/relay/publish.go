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
	aggs  []aggregateKey // per message
	msgs  []*message.Message
}

type aggregateKey struct{ typ, id string }

// publish is the relay's [PublishFunc], minus the error joining: it publishes
// msgs with one Publish call per topic, topics in the order of their first
// message and messages in ID order within a topic. It returns the IDs of the
// messages published, in ID order, and one error per topic (or aggregate)
// that failed.
//
// When a topic's Publish fails and the topic's messages belong to several
// aggregates, the relay probes whether the failure is the publisher's or a
// message's: it publishes the last aggregate's messages on their own, then
// the first's. If both fail, and the publisher did not mark the error
// permanent ([runtime.PermanentError]), the publisher is down and the whole
// topic fails (two extra calls per failed attempt during an outage). If one
// succeeds, or the error is permanent, a message is at fault (too large, say): the relay publishes the
// other aggregates one at a time (and, within a failing aggregate, message
// by message until the bad one), so the bad message fails only its own
// aggregate, whose messages from it on stay pending, in order, while the
// others are published and marked. Messages a failed call did write may be written
// twice; that is the at-least-once contract.
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
		b.aggs = append(b.aggs, aggregateKey{m.AggregateType, m.AggregateID})
		b.msgs = append(b.msgs, toMessage(ctx, m))
	}

	published = make([]int64, 0, len(msgs))
	for _, b := range batches {
		err := r.publishTopic(ctx, b.topic, b.msgs)
		if err == nil {
			published = append(published, b.ids...)
			continue
		}
		groups := b.byAggregate()
		probe := r.probe(ctx, b.topic, groups)
		if probe < 0 && !runtime.IsPermanent(err) {
			failed = append(failed, &PublishError{Topic: b.topic, IDs: b.ids, Err: err})
			continue
		}
		// A message is at fault (the probe went through, or the publisher
		// said so): find it.
		for i, g := range groups {
			if i == probe {
				published = append(published, g.ids...)
				continue
			}
			n, err := r.publishGroup(ctx, b.topic, g)
			published = append(published, g.ids[:n]...)
			if err != nil {
				failed = append(failed, &PublishError{Topic: b.topic, IDs: g.ids[n:], Err: err})
			}
		}
	}
	slices.Sort(published)
	return published, failed
}

// probe publishes the last group of a failed topic batch on its own, then
// the first, and returns the index of the first that succeeds, or -1.
func (r *Relay) probe(ctx context.Context, topic string, groups []*topicBatch) int {
	if len(groups) < 2 {
		return -1
	}
	for _, i := range []int{len(groups) - 1, 0} {
		if ctx.Err() != nil {
			return -1
		}
		if r.publishTopic(ctx, topic, groups[i].msgs) == nil {
			return i
		}
	}
	return -1
}

// publishGroup publishes one aggregate's messages, all at once and, if that
// fails, one at a time in order until one fails, so the message at fault is
// found. It returns how many of the group's messages (a prefix) were
// published and the error of the first that was not.
func (r *Relay) publishGroup(ctx context.Context, topic string, g *topicBatch) (int, error) {
	err := r.publishTopic(ctx, topic, g.msgs)
	if err == nil {
		return len(g.msgs), nil
	}
	if len(g.msgs) == 1 {
		return 0, err
	}
	for n := range g.msgs {
		if err := r.publishTopic(ctx, topic, g.msgs[n:n+1]); err != nil {
			return n, err
		}
	}
	return len(g.msgs), nil
}

// byAggregate splits a topic's batch into one batch per aggregate, in the
// order of each aggregate's first message.
func (b *topicBatch) byAggregate() []*topicBatch {
	var groups []*topicBatch
	index := make(map[aggregateKey]*topicBatch)
	for i, a := range b.aggs {
		g := index[a]
		if g == nil {
			g = &topicBatch{topic: b.topic}
			index[a] = g
			groups = append(groups, g)
		}
		g.ids = append(g.ids, b.ids[i])
		g.msgs = append(g.msgs, b.msgs[i])
	}
	return groups
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
