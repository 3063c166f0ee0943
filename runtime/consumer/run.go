package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/internal/logattr"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// PartitionSubscriber is a subscriber that delivers each partition of a
// topic as a stream of its own: SubscribePartitions returns a channel of
// streams, one per partition (sent when the partition is first read), each
// yielding that partition's messages in order. A stream may hand out
// several messages before the first is acked; its reader acks them in the
// order received, and the subscriber commits them in that order. Every
// channel is closed when ctx is done or the subscriber is closed.
// adapters/kafka's Subscriber implements it.
type PartitionSubscriber interface {
	SubscribePartitions(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error)
}

// ErrSubscriptionClosed is returned by [Consumer.Run] when the subscriber
// closed the subscription while Run's ctx was still live (the subscriber
// was closed).
var ErrSubscriptionClosed = errors.New("consumer: subscription closed")

// Run consumes topic from sub until ctx is done, applying the partitions
// in parallel (a goroutine per partition stream) and, within a partition,
// up to [Config.BatchSize] consecutive messages per database transaction.
// It is the alternative to [Consumer.HandlerFunc] in a Watermill router,
// for subscribers that hand out several messages of a partition at once
// ([PartitionSubscriber]). Run blocks; it returns nil once ctx is done and
// every stream has ended, [ErrSubscriptionClosed] when the subscriber ended
// the subscription first, or the error of SubscribePartitions.
//
// A batch is a run of consecutive messages of one stream whose event types
// have handlers registered with [Handle] and that decode.
// Run begins one transaction (with [Config.TxTimeout] for all of it),
// inserts the batch's inbox markers in stream order, runs the handler of
// every message whose marker it inserted, in stream order, in that
// transaction, and commits; then it acks every message of the batch.
// Messages whose marker exists (applied before, or a repeat of an event
// earlier in the batch) are reported as [OutcomeDuplicate] and their
// handlers do not run. A handler gets the batch's tx: its writes commit or
// roll back with the whole batch.
//
// When anything in the batch fails (a handler error or panic, a marker
// insert, the commit, the deadline), the transaction rolls back, nothing of
// the batch is applied, and Run applies the same messages again one at a
// time, in order, exactly as [Consumer.HandlerFunc] does: retries with
// backoff, dead-lettering, [Config.OnOutcome] per message. A message that
// is not batched (no handler, [HandleWithoutInbox], an unknown type or
// version, malformed) is handled that way too, at its place in the stream.
//
// Run never nacks: where HandlerFunc would nack a message (a failed or
// nacked outcome), Run waits [Config.NackDelay] (doubling each time) and
// applies the same message again, holding back the rest of its partition
// only, until it is applied, dead-lettered or skipped, or ctx is done
// (the message then stays unacked and is delivered again after a restart).
// Each of those tries is logged as HandlerFunc logs a nack, "consumer:
// message nacked" with the reason, the error and the count of tries in a
// row ("nacks"): at Warn on the 1st, 2nd, 4th, 8th, ... try and at Debug
// on the others, so a stalled partition is visible without a line per
// retry (see [Config.Logger]).
//
// # Order and exactly-once
//
// Each stream is applied by one goroutine, in order, and a message is acked
// only after the transaction holding its marker committed; a batch's
// markers are inserted in stream order before any of its handlers runs. So
// within one Run, an aggregate's events (which share a partition) are
// applied in the order of the partition. When a rebalance lets two members
// (or a restart lets a redelivery) work on the same partition at once,
// both insert markers in the same order: the second waits on the first's
// uncommitted marker, then skips the events the first committed, so every
// event is applied once, and an event is applied only after every earlier
// event of its partition was applied by one of them.
func (c *Consumer) Run(ctx context.Context, sub PartitionSubscriber, topic string) error {
	if sub == nil {
		return fmt.Errorf("consumer: %s: %w: nil PartitionSubscriber", c.cfg.Name, ErrInvalidConfig)
	}
	streams, err := sub.SubscribePartitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("consumer: %s: subscribe to %q: %w", c.cfg.Name, topic, err)
	}
	var wg sync.WaitGroup
	for stream := range streams {
		wg.Go(func() { c.runStream(ctx, topic, stream) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return ErrSubscriptionClosed
}

// runStream applies one partition's stream until it ends or ctx is done.
func (c *Consumer) runStream(ctx context.Context, topic string, stream <-chan *message.Message) {
	batch := make([]*message.Message, 0, c.cfg.BatchSize)
	for {
		var first *message.Message
		select {
		case m, ok := <-stream:
			if !ok {
				return
			}
			first = m
		case <-ctx.Done():
			return
		}
		batch = append(batch[:0], first)
		open := c.fill(ctx, stream, &batch)
		if !c.applyStream(ctx, topic, batch) || !open {
			return
		}
	}
}

// fill appends to batch what stream has delivered, up to BatchSize,
// waiting up to BatchWait. It reports false when the stream has ended.
func (c *Consumer) fill(ctx context.Context, stream <-chan *message.Message, batch *[]*message.Message) bool {
	var wait <-chan time.Time
	if c.cfg.BatchWait > 0 {
		t := time.NewTimer(c.cfg.BatchWait)
		defer t.Stop()
		wait = t.C
	}
	for len(*batch) < c.cfg.BatchSize {
		if wait == nil {
			select {
			case m, ok := <-stream:
				if !ok {
					return false
				}
				*batch = append(*batch, m)
				continue
			default:
				return true
			}
		}
		select {
		case m, ok := <-stream:
			if !ok {
				return false
			}
			*batch = append(*batch, m)
		case <-wait:
			return true
		case <-ctx.Done():
			return true
		}
	}
	return true
}

// batched is a message of a batch, decoded.
type batched struct {
	msg   *message.Message
	route *route
	evt   runtime.Event
	meta  Meta
	// ctx, when set, is the context of the message's handler (a
	// delivery's of a group); otherwise it gets the batch's.
	ctx context.Context
}

// applyStream applies batch, in order, and acks each message. It reports
// false when ctx ended first (the rest is left unacked).
func (c *Consumer) applyStream(ctx context.Context, topic string, batch []*message.Message) bool {
	for i := 0; i < len(batch); {
		var run []batched
		for j := i; j < len(batch); j++ {
			b, ok := c.batchable(batch[j], topic)
			if !ok || (len(run) > 0 && b.route.kind != run[0].route.kind) {
				break
			}
			run = append(run, b)
		}
		switch len(run) {
		case 0:
			run = []batched{{msg: batch[i]}}
		case 1:
		default:
			err := c.applyBatch(ctx, run)
			if err == nil {
				i += len(run)
				continue
			}
			c.log.Debug("consumer: batch rolled back, applying its messages one at a time",
				slog.Int("batch", len(run)), slog.String("topic", topic), logattr.Error(err))
		}
		for _, b := range run {
			if !c.applyOne(ctx, topic, b.msg) {
				return false
			}
		}
		i += len(run)
	}
	return true
}

// applyOne handles msg as HandlerFunc does until it is acked, holding it
// for the nack delay between tries. It reports false when ctx ends first.
func (c *Consumer) applyOne(ctx context.Context, topic string, msg *message.Message) bool {
	for {
		if err := c.processFrom(msg, topic, false); err == nil {
			msg.Ack()
			return true
		}
		if ctx.Err() != nil || msg.Context().Err() != nil {
			return false
		}
	}
}

// batchable decodes msg and reports whether it can join a batch: a valid
// envelope whose event type has a handler with the inbox and decodes.
func (c *Consumer) batchable(msg *message.Message, topic string) (batched, bool) {
	env, err := runtime.EnvelopeFromMetadata(msg.UUID, msg.Metadata, msg.Payload)
	if err != nil || env.EventID == uuid.Nil {
		return batched{}, false
	}
	c.mu.RLock()
	r := c.routes[env.EventType]
	c.mu.RUnlock()
	if r == nil || r.kind == withoutInbox {
		return batched{}, false
	}
	evt, err := c.reg.DecodeEnvelope(env)
	if err != nil {
		return batched{}, false
	}
	return batched{msg: msg, route: r, evt: evt, meta: Meta{Envelope: env, Topic: topic, Attempt: 1}}, true
}

// applyBatch applies run (at least two messages with the inbox) in one
// transaction, then reports and acks each message. When it returns an
// error, the transaction rolled back and nothing was acked.
func (c *Consumer) applyBatch(ctx context.Context, run []batched) error {
	start := time.Now()
	applied, err := c.batchTx(ctx, run)
	if err != nil {
		return err
	}
	took := time.Since(start)
	for i, b := range run {
		res := Result{MessageUUID: b.msg.UUID, Meta: b.meta, Outcome: OutcomeApplied, Duration: took, Batch: len(run)}
		if !applied[i] {
			res.Outcome = OutcomeDuplicate
		}
		if c.log.Enabled(ctx, slog.LevelDebug) {
			c.log.Debug("consumer: event applied in a batch", append(c.attrs(&res), slog.String("outcome", res.Outcome.String()), slog.Int("batch", len(run)))...)
		}
		if c.cfg.OnOutcome != nil {
			c.cfg.OnOutcome(res)
		}
		c.forgetNacks(b.msg.UUID)
		b.msg.Ack()
	}
	return nil
}

// batchTx applies run in one inbox transaction, bounded by TxTimeout from
// ctx: the markers in one RecordBatch, then the handler of each message
// whose marker it inserted (applied), in order. A message with a context
// of its own (batched.ctx) has its handler called with that context, under
// the transaction's deadline. When it returns an error, the transaction
// rolled back.
func (c *Consumer) batchTx(ctx context.Context, run []batched) (applied []bool, err error) {
	tctx, cancel := context.WithTimeoutCause(ctx, c.cfg.TxTimeout, errTxDeadline)
	defer cancel()
	deadline, _ := tctx.Deadline()
	entries := make([]sqlstore.InboxEntry, len(run))
	for i, b := range run {
		entries[i] = sqlstore.InboxEntry{EventID: b.meta.EventID, EventType: b.meta.EventType}
	}
	err = c.bounded(tctx, func() error {
		return c.inboxTx(tctx, func(tx sqlstore.Tx) error {
			var err error
			applied, err = c.sql.RecordBatch(tctx, tx, c.cfg.Name, entries, c.cfg.Clock.Now())
			if err != nil {
				return &InboxError{Err: err}
			}
			for i, b := range run {
				if !applied[i] {
					continue
				}
				hctx, cancel := tctx, context.CancelFunc(func() {})
				if b.ctx != nil {
					hctx, cancel = context.WithDeadlineCause(b.ctx, deadline, errTxDeadline)
				}
				err := c.call(hctx, b.route, tx, b.evt, b.meta)
				cancel()
				if err != nil {
					return fmt.Errorf("event %s (%s): %w", b.meta.EventID, b.meta.EventType, err)
				}
			}
			return nil
		})
	})
	if err != nil {
		// An abandoned transaction's goroutine may still write applied.
		return nil, err
	}
	return applied, nil
}
