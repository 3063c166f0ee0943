package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/segmentio/kafka-go"
)

// DefaultPartitionWindow is the default [SubscriberConfig.PartitionWindow].
const DefaultPartitionWindow = 1000

// SubscribePartitions joins the consumer group for topic, like
// [Subscriber.Subscribe], but delivers each partition assigned to this
// member on its own channel: the returned channel yields one stream per
// partition, when its first record arrives, and each stream yields that
// partition's messages in offset order. Streams run in parallel, so a slow
// partition does not hold back the others (until it is
// [SubscriberConfig.PartitionWindow] records behind, below).
//
// A stream hands out up to PartitionWindow messages before the first of
// them is acked (it is buffered that deep): the reader of a stream sees a
// run of consecutive messages at once, which is what lets
// runtime/consumer's Consumer.Run apply them in one database transaction.
// The reader must ack a stream's messages in the order it received them,
// and must keep receiving from the channel of streams (a new stream waits
// for it, holding back the other partitions). Acks are committed in offset
// order, in the background: the highest acked offset of a run of acks, of
// every partition, in one CommitMessages call; an ack is never committed
// before the acks of the messages before it. An ack not yet committed when
// the subscription ends (or the process dies) means a redelivery. A Nack delivers the nacked message again, followed by
// every message of the stream delivered after it (acked or not), once all
// of those have been acked or nacked: a stream that nacks sees the
// messages after the nacked one twice, so its reader should deduplicate by
// UUID (the inbox does) or, like Consumer.Run, retry a failed message
// itself instead of nacking it.
//
// Every channel is closed when ctx is done or [Subscriber.Close] is called;
// messages delivered but not acked are then not committed, and the group
// delivers them again later. SubscribePartitions returns
// [ErrSubscriberClosed] after Close.
//
// A stream stays open for the life of the subscription, also after a
// rebalance moves its partition away (it then goes quiet, after delivering
// what was already read); when the partition comes back, its records arrive
// on the same stream again from the group's committed offset, so some may
// repeat. The messages of a partition that moved may be handled here and by
// the new owner at the same time; the inbox of runtime/consumer keeps such
// overlaps to one application per event, in order (see its doc).
//
// One kafka-go Reader reads all the member's partitions, so a stream that
// stops taking messages (its reader blocked, or stuck on a message) holds
// back the others once its buffer (PartitionWindow fetched records plus
// PartitionWindow handed out) is full. The subscriber logs that at WARN,
// naming the partition, when it has lasted 10s, and at INFO when the
// partition moves again.
func (s *Subscriber) SubscribePartitions(ctx context.Context, topic string) (<-chan (<-chan *message.Message), error) {
	streams := make(chan (<-chan *message.Message))
	err := s.subscribeLanes(ctx, topic, s.cfg.PartitionWindow, func(ctx context.Context) (chan<- *message.Message, func(), bool) {
		out := make(chan *message.Message, s.cfg.PartitionWindow)
		select {
		case streams <- out:
			return out, func() { close(out) }, true
		case <-ctx.Done():
			return nil, nil, false
		}
	}, func() { close(streams) })
	if err != nil {
		return nil, err
	}
	return streams, nil
}

// subscribeParallel is Subscribe with [SubscriberConfig.ParallelPartitions]:
// one lane per partition, each waiting for the ack of its current message,
// all sending on out.
func (s *Subscriber) subscribeParallel(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	err := s.subscribeLanes(ctx, topic, 1, func(context.Context) (chan<- *message.Message, func(), bool) {
		return out, func() {}, true
	}, func() { close(out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// subscribeLanes runs a reader for topic that dispatches each partition's
// records to a lane of its own. newLane returns the channel a new lane
// sends on and what to do when it ends (false: ctx is done); done runs
// after every lane has ended.
func (s *Subscriber) subscribeLanes(ctx context.Context, topic string, window int,
	newLane func(ctx context.Context) (out chan<- *message.Message, end func(), ok bool), done func()) error {
	if topic == "" {
		return errors.New("kafka: subscribe: empty topic")
	}
	rc := s.readerConfig(topic)
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("kafka: subscribe to %q: %w", topic, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrSubscriberClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	reader := kafka.NewReader(rc)
	logger := s.logger.With(watermill.LogFields{"topic": topic, "parallel_partitions": true})
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	go func() {
		defer s.wg.Done()
		var lanes sync.WaitGroup
		com := &committer{s: s, reader: reader, logger: logger, pending: make(map[int]kafka.Message), wake: make(chan struct{}, 1)}
		lanesDone := make(chan struct{})
		committed := make(chan struct{})
		go func() {
			defer close(committed)
			com.run(lanesDone)
		}()
		s.dispatch(ctx, reader, logger, rc.ReadBackoffMax, window, com, &lanes, newLane)
		stop()
		cancel()
		lanes.Wait()
		close(lanesDone)
		<-committed
		done()
		_ = reader.Close()
		logger.Debug("subscription closed", nil)
	}()
	logger.Debug("subscribed", nil)
	return nil
}

// dispatch fetches records until ctx is done and hands each to its
// partition's lane, starting lanes as partitions appear.
func (s *Subscriber) dispatch(ctx context.Context, reader *kafka.Reader, logger watermill.LoggerAdapter, backoff time.Duration, window int, com *committer,
	lanes *sync.WaitGroup, newLane func(ctx context.Context) (chan<- *message.Message, func(), bool)) {
	byPartition := make(map[int]chan kafka.Message)
	for {
		record, ok := fetch(ctx, reader, logger, backoff)
		if !ok {
			return
		}
		in, ok := byPartition[record.Partition]
		if !ok {
			out, end, ok := newLane(ctx)
			if !ok {
				return
			}
			in = make(chan kafka.Message, s.cfg.PartitionWindow)
			byPartition[record.Partition] = in
			l := &lane{s: s, com: com, in: in, out: out, window: window,
				logger: logger.With(watermill.LogFields{"partition": record.Partition})}
			lanes.Go(func() {
				defer end()
				l.run(ctx)
			})
		}
		select {
		case in <- record:
			continue
		default:
		}
		if !s.waitForLane(ctx, in, record) {
			return
		}
	}
}

// defaultStallWarnAfter is how long a full partition stream holds the
// member's other partitions back before the subscriber logs a WARN.
const defaultStallWarnAfter = 10 * time.Second

// waitForLane sends record to its partition's full lane, and reports false
// when ctx is done first. Every partition of the member waits meanwhile
// (one reader fetches them all): after stallWarnAfter it logs so at WARN,
// once, and at INFO when the partition moves again, so that a poison
// message that stops a whole member is not silent.
func (s *Subscriber) waitForLane(ctx context.Context, in chan<- kafka.Message, record kafka.Message) bool {
	start := time.Now()
	timer := time.NewTimer(s.stallWarnAfter)
	defer timer.Stop()
	warned := false
	for {
		select {
		case in <- record:
			if warned {
				s.warn.Info("kafka: partition moves again; the member's other partitions go on",
					"topic", record.Topic, "partition", record.Partition, "waited", time.Since(start).Round(time.Millisecond))
			}
			return true
		case <-ctx.Done():
			return false
		case <-timer.C:
			warned = true
			s.warn.Warn("kafka: a partition's stream is full behind a message its reader has not acked; every partition of this member waits for it (one kafka-go reader fetches them all)",
				"topic", record.Topic, "partition", record.Partition, "offset", record.Offset,
				"records_waiting", cap(in), "waited", time.Since(start).Round(time.Millisecond))
		}
	}
}

// lane delivers the records of one partition in offset order, with up to
// window messages unacked, and commits them in order.
type lane struct {
	s      *Subscriber
	com    *committer
	in     <-chan kafka.Message
	out    chan<- *message.Message
	window int
	logger watermill.LoggerAdapter
}

// delivery is a message handed out and its record.
type delivery struct {
	msg    *message.Message
	cancel context.CancelFunc
	record kafka.Message
}

// run delivers until ctx is done.
func (l *lane) run(ctx context.Context) {
	var (
		inflight []delivery      // handed out, unresolved, in offset order
		replay   []kafka.Message // to deliver again before reading in
		next     *delivery       // prepared, not sent yet
	)
	defer func() {
		for _, d := range inflight {
			d.cancel()
		}
		if next != nil {
			next.cancel()
		}
	}()
	for {
		if next == nil && len(inflight) < l.window && len(replay) > 0 {
			next = l.prepare(ctx, replay[0])
			replay = replay[1:]
		}
		var (
			send    chan<- *message.Message
			sendMsg *message.Message
			recv    <-chan kafka.Message
			acked   <-chan struct{}
			nacked  <-chan struct{}
		)
		switch {
		case next != nil:
			send, sendMsg = l.out, next.msg
		case len(replay) == 0 && len(inflight) < l.window:
			recv = l.in
		}
		if len(inflight) > 0 {
			acked, nacked = inflight[0].msg.Acked(), inflight[0].msg.Nacked()
		}
		select {
		case send <- sendMsg:
			inflight = append(inflight, *next)
			next = nil
		case r := <-recv:
			next = l.prepare(ctx, r)
		case <-acked:
			// Commit the run of acks at the head in one call.
			n := 1
			for n < len(inflight) && isDone(inflight[n].msg.Acked()) {
				n++
			}
			for _, d := range inflight[:n] {
				d.cancel()
			}
			l.com.add(inflight[n-1].record)
			inflight = inflight[n:]
		case <-nacked:
			// Go back: wait until everything handed out after the nacked
			// message is resolved, then deliver them all again.
			again := make([]kafka.Message, 0, len(inflight)+1+len(replay))
			for _, d := range inflight {
				select {
				case <-d.msg.Acked():
				case <-d.msg.Nacked():
				case <-ctx.Done():
					return
				}
				d.cancel()
				again = append(again, d.record)
			}
			inflight = inflight[:0]
			if next != nil {
				next.cancel()
				again = append(again, next.record)
				next = nil
			}
			replay = append(again, replay...)
			l.logger.Trace("message nacked, delivering it and those after it again", watermill.LogFields{"offset": replay[0].Offset})
			if l.s.cfg.NackResendSleep > 0 && !sleepCtx(ctx, l.s.cfg.NackResendSleep) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// prepare makes the message of record r.
func (l *lane) prepare(ctx context.Context, r kafka.Message) *delivery {
	msg := fromRecord(r)
	msgCtx, cancel := context.WithCancel(withRecordInfo(ctx, r))
	msg.SetContext(msgCtx)
	return &delivery{msg: msg, cancel: cancel, record: r}
}

// committer commits the offsets the lanes of a subscription acked, in the
// background, each partition's highest in one CommitMessages call: the lanes
// go on delivering while a commit is in flight, and the commits of all the
// partitions share round trips.
type committer struct {
	s      *Subscriber
	reader *kafka.Reader
	logger watermill.LoggerAdapter

	mu      sync.Mutex
	pending map[int]kafka.Message // partition → highest acked record not committed
	wake    chan struct{}         // capacity 1: there is something pending
}

// add records that r and everything before it on its partition is acked.
func (c *committer) add(r kafka.Message) {
	c.mu.Lock()
	if cur, ok := c.pending[r.Partition]; !ok || r.Offset > cur.Offset {
		c.pending[r.Partition] = r
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run commits what is pending until stop is closed, then commits what is
// left once more.
func (c *committer) run(stop <-chan struct{}) {
	for {
		select {
		case <-c.wake:
			c.flush()
		case <-stop:
			c.flush()
			return
		}
	}
}

// flush commits the pending offsets. Like [Subscriber.commit] it gives up
// after the session timeout: by then the group has moved the partitions.
func (c *committer) flush() {
	c.mu.Lock()
	records := make([]kafka.Message, 0, len(c.pending))
	for _, r := range c.pending {
		records = append(records, r)
	}
	clear(c.pending)
	c.mu.Unlock()
	if len(records) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.SessionTimeout)
	defer cancel()
	if err := c.reader.CommitMessages(ctx, records...); err != nil {
		// The handlers' work is done; a failed commit (usually a
		// rebalance) only means the messages will be delivered again.
		c.logger.Info("commit failed, the messages may be delivered again", watermill.LogFields{"error": err.Error(), "partitions": len(records)})
		return
	}
	c.logger.Trace("acked offsets committed", watermill.LogFields{"partitions": len(records)})
}

// isDone reports whether ch is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
