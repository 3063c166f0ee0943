package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/internal/backoff"
)

// DefaultPartitionWindow is the default [SubscriberConfig.PartitionWindow].
const DefaultPartitionWindow = 1000

// SubscribePartitions joins the consumer group for topic, like
// [Subscriber.Subscribe], but delivers each partition assigned to this
// member on its own channel: the returned channel yields one stream per
// partition, when its first record arrives, and each stream yields that
// partition's messages in offset order. Streams run in parallel, and each
// partition is fetched on its own, so a slow or stuck partition holds back
// only itself, never the member's other partitions (below).
//
// A stream hands out up to PartitionWindow messages before the first of
// them is acked (it is buffered that deep): the reader of a stream sees a
// run of consecutive messages at once, which is what lets
// runtime/consumer's Consumer.Run apply them in one database transaction.
// The reader must ack a stream's messages in the order it received them,
// and must keep receiving from the channel of streams (a new stream waits
// for it, holding back its partition). Acks are committed in offset order,
// in the background: the highest acked offset of a run of acks, of every
// partition, in one commit request; an ack is never committed before the
// acks of the messages before it. An ack not yet committed when the
// subscription ends (or the process dies) means a redelivery. A Nack
// delivers the nacked message again, followed by every message of the
// stream delivered after it (acked or not), once all of those have been
// acked or nacked: a stream that nacks sees the messages after the nacked
// one twice, so its reader should deduplicate by UUID (the inbox does) or,
// like Consumer.Run, retry a failed message itself instead of nacking it.
//
// Every channel is closed when ctx is done or [Subscriber.Close] is called;
// messages delivered but not acked are then not committed, and the group
// delivers them again later. SubscribePartitions returns
// [ErrSubscriberClosed] after Close.
//
// A stream stays open for the life of the subscription, also after a
// rebalance moves its partition away (it then goes quiet, after delivering
// what was already read); when the partition comes back (or stays through
// a rebalance), its records arrive on the same stream again from the
// group's committed offset, so some may repeat. The messages of a partition
// that moved may be handled here and by the new owner at the same time; the
// inbox of runtime/consumer keeps such overlaps to one application per
// event, in order (see its doc).
//
// The member joins the group with kafka-go's ConsumerGroup and fetches
// every partition it is assigned with a kafka-go Reader of its own, so a
// stream that stops taking messages (its reader blocked, or stuck on a
// message) holds back only its own partition: once its buffer
// (PartitionWindow fetched records plus PartitionWindow handed out) is
// full, fetching stops for that partition alone, and the others go on.
// Nothing is skipped meanwhile: the partition's records wait in the broker,
// and its committed offset does not pass its first unacked message. The
// subscriber logs a full stream at WARN, naming the partition, when it has
// lasted 10s, and at INFO when the partition moves again.
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

// subscribeParallel is Subscribe without [SubscriberConfig.SerialPartitions]:
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

// newLaneFunc returns the channel a new lane sends on and what to do when
// the lane ends, or false when ctx is done first.
type newLaneFunc func(ctx context.Context) (out chan<- *message.Message, end func(), ok bool)

// subscribeLanes joins the consumer group for topic and dispatches each
// assigned partition's records to a lane of its own, each partition fetched
// by a reader of its own, so that a lane that stops taking records holds
// back only its partition. done runs after every lane has ended.
func (s *Subscriber) subscribeLanes(ctx context.Context, topic string, window int, newLane newLaneFunc, done func()) error {
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

	group, err := kafka.NewConsumerGroup(groupConfig(rc))
	if err != nil {
		s.wg.Done()
		return fmt.Errorf("kafka: subscribe to %q: %w", topic, err)
	}
	logger := s.logger.With(watermill.LogFields{"topic": topic, "parallel_partitions": true})
	ps := &partitionSub{
		s:       s,
		topic:   topic,
		rc:      rc,
		group:   group,
		window:  window,
		newLane: newLane,
		logger:  logger,
		com: &committer{topic: topic, logger: logger,
			pending: make(map[int]int64), wake: make(chan struct{}, 1)},
		lanes: make(map[int]chan kafka.Message),
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stop()
		ps.run(ctx, done)
		logger.Debug("subscription closed", nil)
	}()
	logger.Debug("subscribed", nil)
	return nil
}

// groupConfig returns the kafka-go consumer group settings of the reader
// settings rc, mapped as kafka-go's group Reader maps them.
func groupConfig(rc kafka.ReaderConfig) kafka.ConsumerGroupConfig {
	return kafka.ConsumerGroupConfig{
		ID:                     rc.GroupID,
		Brokers:                slices.Clone(rc.Brokers),
		Dialer:                 rc.Dialer,
		Topics:                 []string{rc.Topic},
		GroupBalancers:         rc.GroupBalancers,
		HeartbeatInterval:      rc.HeartbeatInterval,
		PartitionWatchInterval: rc.PartitionWatchInterval,
		WatchPartitionChanges:  rc.WatchPartitionChanges,
		SessionTimeout:         rc.SessionTimeout,
		RebalanceTimeout:       rc.RebalanceTimeout,
		JoinGroupBackoff:       rc.JoinGroupBackoff,
		RetentionTime:          rc.RetentionTime,
		StartOffset:            rc.StartOffset,
		Logger:                 rc.Logger,
		ErrorLogger:            rc.ErrorLogger,
	}
}

// partitionReaderConfig returns the settings of the reader that fetches
// partition of the subscription rc, outside the group: the group assigns
// the partition and keeps its offsets, the reader only fetches.
func partitionReaderConfig(rc kafka.ReaderConfig, partition int) kafka.ReaderConfig {
	rc.Brokers = slices.Clone(rc.Brokers)
	rc.GroupID = ""
	rc.GroupTopics = nil
	rc.Partition = partition
	if rc.ReadLagInterval == 0 {
		rc.ReadLagInterval = -1 // no lag reports: nothing reads them
	}
	return rc
}

// partitionSub is one subscription of SubscribePartitions or of Subscribe
// (without SerialPartitions): one group member, a fetching goroutine per
// assigned partition and generation, and a lane per partition for the life
// of the subscription.
type partitionSub struct {
	s       *Subscriber
	topic   string
	rc      kafka.ReaderConfig
	group   *kafka.ConsumerGroup
	window  int
	newLane newLaneFunc
	logger  watermill.LoggerAdapter
	com     *committer

	mu       sync.Mutex
	lanes    map[int]chan kafka.Message // partition → its lane's input
	stopping bool                       // no new lanes
	creating sync.WaitGroup             // newLane calls in progress
	running  sync.WaitGroup             // lanes running
}

// run consumes until ctx is done, then ends the lanes, commits what they
// acked, runs done and leaves the group.
func (ps *partitionSub) run(ctx context.Context, done func()) {
	committed := make(chan struct{})
	lanesDone := make(chan struct{})
	go func() {
		defer close(committed)
		ps.com.run(lanesDone)
	}()
	generations := make(chan struct{})
	go func() {
		defer close(generations)
		ps.generations(ctx)
	}()

	<-ctx.Done()
	ps.mu.Lock()
	ps.stopping = true
	ps.mu.Unlock()
	ps.creating.Wait()
	ps.running.Wait()
	// The generation is still on (its fetchers end with it, not with
	// ctx), so the acks of the lanes can still be committed.
	close(lanesDone)
	<-committed
	done()
	// Close ends the generation, waits for its fetchers and leaves the
	// group; it always returns nil.
	_ = ps.group.Close()
	<-generations
}

// generations starts the fetchers of every generation of the group until
// ctx is done.
func (ps *partitionSub) generations(ctx context.Context) {
	for {
		gen, err := ps.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			// The group logged it (kafka-go's ErrorLogger) and tries
			// again by itself.
			ps.logger.Debug("joining the group failed", watermill.LogFields{"error": err.Error()})
			continue
		}
		assigned := gen.Assignments[ps.topic]
		ps.logger.Debug("partitions assigned", watermill.LogFields{"generation": gen.ID, "partitions": len(assigned)})
		ps.com.setGeneration(gen)
		for _, a := range assigned {
			gen.Start(func(genCtx context.Context) {
				ps.fetchPartition(ctx, genCtx, a.ID, a.Offset)
			})
		}
	}
}

// fetchPartition fetches partition from offset (the group's committed
// offset, or kafka.FirstOffset or kafka.LastOffset when there is none) and
// hands its records to the partition's lane, until genCtx is done: when
// ctx is done first it stops fetching and waits for genCtx, since the
// generation ends as soon as one of its goroutines returns, and the last
// acks of the subscription are committed through it.
func (ps *partitionSub) fetchPartition(ctx, genCtx context.Context, partition int, offset int64) {
	defer func() { <-genCtx.Done() }()
	if genCtx.Err() != nil {
		return
	}
	fetchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(genCtx, cancel)
	defer stop()

	rc := partitionReaderConfig(ps.rc, partition)
	reader := kafka.NewReader(rc)
	// Close of a reader outside a group always returns nil.
	defer func() { _ = reader.Close() }()
	logger := ps.logger.With(watermill.LogFields{"partition": partition})
	warn := ps.s.warn.With("topic", rc.Topic, "partition", partition)
	if err := reader.SetOffset(offset); err != nil {
		// Only a closed reader refuses an offset.
		logger.Error("set the partition's offset", err, watermill.LogFields{"offset": offset})
		return
	}
	var in chan<- kafka.Message
	for {
		record, ok := fetch(fetchCtx, reader, warn, rc.ReadBackoffMax)
		if !ok {
			return
		}
		if in == nil {
			if in, ok = ps.lane(ctx, fetchCtx, partition); !ok {
				return
			}
		}
		select {
		case in <- record:
			continue
		default:
		}
		if !ps.s.waitForLane(fetchCtx, in, record) {
			return
		}
	}
}

// lane returns the input of partition's lane, starting the lane (which
// runs until ctx is done) if it is the partition's first record. It
// reports false when fetchCtx is done first or the subscription is ending.
func (ps *partitionSub) lane(ctx, fetchCtx context.Context, partition int) (chan<- kafka.Message, bool) {
	ps.mu.Lock()
	if in, ok := ps.lanes[partition]; ok {
		ps.mu.Unlock()
		return in, true
	}
	if ps.stopping {
		ps.mu.Unlock()
		return nil, false
	}
	ps.creating.Add(1)
	ps.mu.Unlock()
	defer ps.creating.Done()

	out, end, ok := ps.newLane(fetchCtx)
	if !ok {
		return nil, false
	}
	in := make(chan kafka.Message, ps.s.cfg.PartitionWindow)
	l := &lane{s: ps.s, com: ps.com, in: in, out: out, window: ps.window,
		logger: ps.logger.With(watermill.LogFields{"partition": partition})}
	ps.mu.Lock()
	ps.lanes[partition] = in
	ps.mu.Unlock()
	// running.Wait in run waits for creating first, so this Go is not
	// after it.
	ps.running.Go(func() {
		defer end()
		l.run(ctx)
	})
	return in, true
}

// defaultStallWarnAfter is how long a partition's stream stays full before
// the subscriber logs a WARN.
const defaultStallWarnAfter = 10 * time.Second

// waitForLane sends record to its partition's full lane, and reports false
// when ctx is done first. Only that partition waits meanwhile (each has its
// own reader): after stallWarnAfter it logs so at WARN, once, and at INFO
// when the partition moves again, so that a poison message that stops a
// partition is not silent.
func (s *Subscriber) waitForLane(ctx context.Context, in chan<- kafka.Message, record kafka.Message) bool {
	start := time.Now()
	timer := time.NewTimer(s.stallWarnAfter)
	defer timer.Stop()
	warned := false
	for {
		select {
		case in <- record:
			if warned {
				s.warn.Info("kafka: partition moves again",
					"topic", record.Topic, "partition", record.Partition, "waited", time.Since(start).Round(time.Millisecond))
			}
			return true
		case <-ctx.Done():
			return false
		case <-timer.C:
			warned = true
			s.warn.Warn("kafka: a partition's stream is full behind a message its reader has not acked; the partition waits for it (the member's other partitions go on)",
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
			if l.s.cfg.NackResendSleep > 0 && !backoff.Sleep(ctx, l.s.cfg.NackResendSleep) {
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
// background, each partition's highest in one call through the group's
// current generation: the lanes go on delivering while a commit is in
// flight, and the commits of all the partitions share round trips.
type committer struct {
	topic  string
	logger watermill.LoggerAdapter

	mu sync.Mutex
	// commit commits offsets through a generation; nil means
	// (*kafka.Generation).CommitOffsets (tests replace it).
	commit func(*kafka.Generation, map[string]map[int]int64) error

	gen     *kafka.Generation // the current generation; nil before the first
	failing bool              // a commit through gen failed, and was logged
	pending map[int]int64     // partition → offset to commit (highest acked + 1)
	wake    chan struct{}     // capacity 1: there is something to do
}

// add records that r and everything before it on its partition is acked.
func (c *committer) add(r kafka.Message) {
	c.mu.Lock()
	// Kafka's committed offset is the next one to read.
	if cur, ok := c.pending[r.Partition]; !ok || r.Offset+1 > cur {
		c.pending[r.Partition] = r.Offset + 1
	}
	c.mu.Unlock()
	c.poke()
}

// setGeneration makes gen the generation the next commits go through.
func (c *committer) setGeneration(gen *kafka.Generation) {
	c.mu.Lock()
	c.gen, c.failing = gen, false
	c.mu.Unlock()
	c.poke()
}

func (c *committer) poke() {
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

// flush commits the pending offsets. Before the first generation, and when
// a commit fails, they stay pending; each request is bounded by the group's
// Timeout (5s by default). What is still pending when the subscription
// ends is not committed: those messages are delivered again.
func (c *committer) flush() {
	c.mu.Lock()
	gen := c.gen
	if gen == nil || len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	offsets := maps.Clone(c.pending)
	clear(c.pending)
	c.mu.Unlock()
	commit := c.commit
	if commit == nil {
		commit = (*kafka.Generation).CommitOffsets
	}
	if err := commit(gen, map[string]map[int]int64{c.topic: offsets}); err != nil {
		// Usually a rebalance: the generation has ended. Keep the offsets
		// for the next try (the next ack, or the next generation), unless
		// a later ack has replaced them; until then the messages would be
		// delivered again after a restart.
		c.mu.Lock()
		for p, o := range offsets {
			if cur, ok := c.pending[p]; !ok || o > cur {
				c.pending[p] = o
			}
		}
		// Once per generation at INFO: while a rebalance ends it, every
		// ack tries again and fails alike (hundreds a second).
		first := !c.failing && c.gen == gen
		if first {
			c.failing = true
		}
		c.mu.Unlock()
		log := c.logger.Debug
		if first {
			log = c.logger.Info
		}
		log("commit failed, trying again with the next ack or generation", watermill.LogFields{"error": err.Error(), "partitions": len(offsets)})
		return
	}
	c.mu.Lock()
	if c.gen == gen {
		c.failing = false
	}
	c.mu.Unlock()
	c.logger.Trace("acked offsets committed", watermill.LogFields{"partitions": len(offsets)})
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
