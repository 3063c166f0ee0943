package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime"
)

// errEarlierFailed is the reason given for a message that was not tried
// because an earlier message of its aggregate failed in the same batch.
var errEarlierFailed = errors.New("relay: not published: an earlier message of its aggregate failed")

// topicBatch is the part of a claimed batch bound for one topic.
type topicBatch struct {
	topic string
	ids   []int64
	aggs  []aggregateKey // per message
	msgs  []*message.Message
}

type aggregateKey struct{ typ, id string }

// topicResult is what publishing one topicBatch gave.
type topicResult struct {
	published []int64
	failed    []Failure
}

// publish publishes msgs with one Publish call per topic (topics
// concurrently, at most Config.PublishConcurrency at a time; messages in ID
// order within a topic) and returns the [Outcome]: every message is in
// Published or Failed.
//
// When a topic's Publish fails and the publisher says which messages failed
// ([runtime.PublishErrors], as adapters/kafka does), exactly the acknowledged
// messages count as published, and nothing is published again.
//
// When the publisher returns one error for the whole call, the relay probes
// whether the failure is the publisher's or a message's: it publishes the
// last aggregate's messages on their own, then the first's. If both fail and
// the error is not permanent, the publisher is down and the whole topic
// fails. Otherwise a message is at fault (too large, say): the relay
// publishes the other aggregates one at a time (and, within a failing
// aggregate, message by message until the bad one), so the bad message fails
// only its own aggregate. Messages a failed call did write may be written
// twice; that is the at-least-once contract.
//
// An aggregate whose messages go to more than one topic is published in
// stages: a message bound for another topic than the aggregate's message
// before it waits for that one's stage, and is not tried (errEarlierFailed)
// when an earlier message of its aggregate failed. So a message never goes
// out before an earlier message of its aggregate was acknowledged,
// whichever topics they are bound for. An aggregate that stays on one
// topic, the default (its type), takes one stage.
func (r *Relay) publish(ctx context.Context, msgs []runtime.OutboxMessage) Outcome {
	stages := stagesOf(msgs)
	if len(stages) == 1 {
		return r.publishStage(ctx, msgs)
	}
	var out Outcome
	failed := make(map[aggregateKey]bool)
	for _, stage := range stages {
		var part []runtime.OutboxMessage
		for _, m := range stage {
			if failed[aggregateKey{m.AggregateType, m.AggregateID}] {
				out.Failed = append(out.Failed, Failure{ID: m.ID, Err: errEarlierFailed})
				continue
			}
			part = append(part, m)
		}
		if len(part) == 0 {
			continue
		}
		o := r.publishStage(ctx, part)
		out.Published = append(out.Published, o.Published...)
		out.Failed = append(out.Failed, o.Failed...)
		if len(o.Failed) > 0 {
			aggOf := make(map[int64]aggregateKey, len(part))
			for _, m := range part {
				aggOf[m.ID] = aggregateKey{m.AggregateType, m.AggregateID}
			}
			for _, f := range o.Failed {
				failed[aggOf[f.ID]] = true
			}
		}
	}
	slices.SortFunc(out.Failed, func(a, b Failure) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// stagesOf splits msgs (in ID order) into the stages publish goes through,
// each in ID order: a message is in its aggregate's previous message's
// stage when both are bound for the same topic, and in the next stage
// otherwise.
func stagesOf(msgs []runtime.OutboxMessage) [][]runtime.OutboxMessage {
	if !slices.ContainsFunc(msgs, func(m runtime.OutboxMessage) bool { return m.Topic != msgs[0].Topic }) {
		return [][]runtime.OutboxMessage{msgs} // one topic, the usual batch
	}
	type last struct {
		topic string
		stage int
	}
	prev := make(map[aggregateKey]last)
	stage := make([]int, len(msgs))
	n := 1
	for i, m := range msgs {
		k := aggregateKey{m.AggregateType, m.AggregateID}
		l, ok := prev[k]
		if ok && l.topic != m.Topic {
			l.stage++
		}
		l.topic = m.Topic
		prev[k] = l
		stage[i] = l.stage
		n = max(n, l.stage+1)
	}
	if n == 1 {
		return [][]runtime.OutboxMessage{msgs}
	}
	stages := make([][]runtime.OutboxMessage, n)
	for i, m := range msgs {
		stages[stage[i]] = append(stages[stage[i]], m)
	}
	return stages
}

// publishStage publishes msgs, which hold at most one topic's messages of
// each aggregate, with one Publish call per topic (see publish).
func (r *Relay) publishStage(ctx context.Context, msgs []runtime.OutboxMessage) Outcome {
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
		b.msgs = append(b.msgs, r.toMessage(ctx, m))
	}

	results := make([]topicResult, len(batches))
	if len(batches) == 1 {
		results[0] = r.publishBatch(ctx, batches[0])
	} else {
		sem := make(chan struct{}, r.cfg.PublishConcurrency)
		var wg sync.WaitGroup
		for i, b := range batches {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				results[i] = r.publishBatch(ctx, b)
			})
		}
		wg.Wait()
	}
	var out Outcome
	out.Published = make([]int64, 0, len(msgs))
	for _, res := range results {
		out.Published = append(out.Published, res.published...)
		out.Failed = append(out.Failed, res.failed...)
	}
	return out
}

// publishBatch publishes one topic's messages (see publish).
func (r *Relay) publishBatch(ctx context.Context, b *topicBatch) topicResult {
	err := r.publishTopic(ctx, b.topic, b.msgs)
	if err == nil {
		return topicResult{published: b.ids}
	}
	var perMessage runtime.PublishErrors
	if errors.As(err, &perMessage) && len(perMessage) == len(b.msgs) {
		res := b.perMessage(perMessage)
		if id, ok := b.overtaken(perMessage); ok {
			r.log.Warn("relay: the publisher acknowledged a message after an earlier message of its aggregate failed in the same call; that aggregate is out of order on the broker",
				attrOutboxID, id, attrTopic, b.topic)
		}
		if permanentFailures(res.failed) > 1 {
			// A broker refuses a whole partition batch when one record
			// of it is too large, and the client reports the error for
			// every record of the batch: verify each alone.
			res = r.verifyPermanent(ctx, b, res)
		}
		return res
	}
	groups := b.byAggregate()
	probe := -1
	if ctx.Err() == nil {
		probe = r.probe(ctx, b.topic, groups)
	}
	if probe < 0 && !runtime.IsPermanent(err) {
		return topicResult{failed: failAll(b.ids, err)}
	}
	// A message is at fault (the probe went through, or the publisher said
	// so): find it.
	var res topicResult
	r.publishGroups(ctx, b.topic, groups, probe, &res)
	return res
}

// publishGroups publishes each aggregate's group on its own (publishGroup),
// but for groups[done] (when done >= 0), which the probe already published,
// and adds what was published and what failed to res, in group order.
func (r *Relay) publishGroups(ctx context.Context, topic string, groups []*topicBatch, done int, res *topicResult) {
	for i, g := range groups {
		if i == done {
			res.published = append(res.published, g.ids...)
			continue
		}
		n, err := r.publishGroup(ctx, topic, g)
		res.published = append(res.published, g.ids[:n]...)
		if err != nil {
			res.failed = append(res.failed, failure(g.ids[n], err))
			res.failed = append(res.failed, failAll(g.ids[n+1:], errEarlierFailed)...)
		}
	}
}

// perMessage turns per-message publish errors into a result: exactly the
// acknowledged messages count as published. (One aggregate's messages share
// a key, so a broker that orders by key, as Kafka does by partition, takes
// or refuses them together; a later message acknowledged after an earlier
// one failed is on the broker already, and republishing it would only add a
// duplicate.)
func (b *topicBatch) perMessage(errs runtime.PublishErrors) topicResult {
	var res topicResult
	for i, id := range b.ids {
		if errs[i] != nil {
			res.failed = append(res.failed, failure(id, errs[i]))
		} else {
			res.published = append(res.published, id)
		}
	}
	return res
}

// overtaken reports the first message that errs says was acknowledged
// although an earlier message of its aggregate in the call failed: a
// publisher that keeps [runtime.PublishErrors]' contract never does that.
func (b *topicBatch) overtaken(errs runtime.PublishErrors) (int64, bool) {
	failed := make(map[aggregateKey]bool)
	for i, id := range b.ids {
		switch {
		case errs[i] != nil:
			failed[b.aggs[i]] = true
		case failed[b.aggs[i]]:
			return id, true
		}
	}
	return 0, false
}

// permanentFailures counts the permanent failures of fs.
func permanentFailures(fs []Failure) int {
	n := 0
	for _, f := range fs {
		if f.Permanent {
			n++
		}
	}
	return n
}

// verifyPermanent publishes the failed messages of res again, aggregate by
// aggregate and one message at a time until one fails (publishGroup), so a
// permanent failure is blamed only on a message that fails on its own.
func (r *Relay) verifyPermanent(ctx context.Context, b *topicBatch, res topicResult) topicResult {
	failed := make(map[int64]bool, len(res.failed))
	for _, f := range res.failed {
		failed[f.ID] = true
	}
	retry := &topicBatch{topic: b.topic}
	for i, id := range b.ids {
		if failed[id] {
			retry.ids = append(retry.ids, id)
			retry.aggs = append(retry.aggs, b.aggs[i])
			retry.msgs = append(retry.msgs, b.msgs[i])
		}
	}
	out := topicResult{published: res.published}
	r.publishGroups(ctx, b.topic, retry.byAggregate(), -1, &out)
	return out
}

// failure is the Failure of message id with err, classed as the
// publisher classed err ([runtime.PermanentError],
// [runtime.TransientError]).
func failure(id int64, err error) Failure {
	return Failure{ID: id, Err: err, Permanent: runtime.IsPermanent(err), Transient: runtime.IsTransient(err)}
}

// failAll returns a Failure for each of ids with err.
func failAll(ids []int64, err error) []Failure {
	out := make([]Failure, len(ids))
	f := failure(0, err)
	for i, id := range ids {
		f.ID = id
		out[i] = f
	}
	return out
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
	if len(g.msgs) == 1 || ctx.Err() != nil {
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
		g.aggs = append(g.aggs, a)
		g.msgs = append(g.msgs, b.msgs[i])
	}
	return groups
}

// toMessage converts an outbox message to a Watermill message following the
// wire contract: UUID = event id, metadata = [runtime.Envelope.Metadata] or,
// with [Config.CloudEvents], [runtime.CloudEvents.Metadata], payload = the
// event's JSON, context = ctx.
func (r *Relay) toMessage(ctx context.Context, m runtime.OutboxMessage) *message.Message {
	wm := message.NewMessage(m.EventID.String(), message.Payload(m.Payload))
	if r.cfg.CloudEvents != nil {
		wm.Metadata = r.cfg.CloudEvents.Metadata(m.Envelope)
	} else {
		wm.Metadata = m.Metadata()
	}
	wm.SetContext(ctx)
	return wm
}

// publishTopic publishes msgs to topic. It stops waiting, and reports
// ctx's cause, when ctx is done before Publish returns: a publisher that
// ignores message contexts cannot hold the relay past its deadline. The
// abandoned Publish call may still deliver the messages; they stay unmarked
// and are published again later (at-least-once).
func (r *Relay) publishTopic(ctx context.Context, topic string, msgs []*message.Message) error {
	if topic == "" {
		return runtime.Permanent(errors.New("relay: empty topic"))
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
		return fmt.Errorf("relay: publish abandoned: %w", context.Cause(ctx))
	}
}
