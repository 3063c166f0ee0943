package redis

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"

	"github.com/gooutbox/outbox/internal/backoff"
)

// takeOverBatch is how many pending entries one XPENDING lists.
const takeOverBatch = 100

// Subscribe subscribes to the stream topic in the consumer group; see
// [Subscriber] for the order of delivery. Unless
// [SubscriberConfig.SharedGroup] is set, the subscription first takes over
// every entry pending in the group (read by a consumer that stopped before
// acking it) and hands those out, one at a time and in stream order, before
// it reads any entry not read yet.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.topicsMu.Lock()
	if s.topics == nil {
		s.topics = map[string]bool{}
	}
	s.topics[topic] = true
	s.topicsMu.Unlock()
	if s.cfg.SharedGroup {
		return s.subscribeInner(ctx, topic)
	}
	if s.closingCtx.Err() != nil {
		return nil, errors.New("redis: subscribe: subscriber closed")
	}
	if err := s.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.closingCtx, cancel)
		defer stop()
		logger := s.logger.With(watermill.LogFields{"topic": topic, "consumer_group": s.cfg.ConsumerGroup, "consumer_uuid": s.cfg.Consumer})
		if !s.takeOver(ctx, topic, out, logger) {
			close(out)
			return
		}
		in, err := s.subscribeInner(ctx, topic)
		if err != nil {
			logger.Error("subscribe after taking over the pending entries", err, nil)
			close(out)
			return
		}
		defer close(out)
		for m := range in {
			select {
			case out <- m:
			case <-ctx.Done():
				// The inner subscription ends with ctx and closes in;
				// m is not acked, so it stays pending.
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}

// subscribeInner subscribes with watermill-redisstream's subscriber unless
// Close has begun: its Subscribe must not run beside its Close (it reads
// the closed flag without a lock, and adds to the wait group Close waits
// on).
func (s *Subscriber) subscribeInner(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.innerMu.Lock()
	defer s.innerMu.Unlock()
	if s.closingCtx.Err() != nil {
		return nil, errors.New("subscriber closed")
	}
	return s.Subscriber.Subscribe(ctx, topic)
}

// takeOver claims the group's pending entries of topic, batch by batch in
// stream order, and hands each out on out until it is acked (again after a
// nack). It reports false when ctx is done first; an entry handed out but
// not acked then stays pending, for the next subscription to take over.
func (s *Subscriber) takeOver(ctx context.Context, topic string, out chan<- *message.Message, logger watermill.LoggerAdapter) bool {
	taken := 0
	for {
		pending, err := s.client.XPendingExt(ctx, &goredis.XPendingExtArgs{
			Stream: topic, Group: s.cfg.ConsumerGroup, Start: "-", End: "+", Count: takeOverBatch,
		}).Result()
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			logger.Error("list the group's pending entries, trying again", err, nil)
			if !backoff.Sleep(ctx, time.Second) {
				return false
			}
			continue
		}
		if len(pending) == 0 {
			if taken > 0 {
				logger.Info("took over the entries pending in the group", watermill.LogFields{"entries": taken})
			}
			s.forgetStale(ctx, topic, logger)
			return true
		}
		ids := make([]string, len(pending))
		for i, p := range pending {
			ids[i] = p.ID
		}
		entries, err := s.client.XClaim(ctx, &goredis.XClaimArgs{
			Stream: topic, Group: s.cfg.ConsumerGroup, Consumer: s.cfg.Consumer, MinIdle: 0, Messages: ids,
		}).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			if ctx.Err() != nil {
				return false
			}
			logger.Error("claim the group's pending entries, trying again", err, nil)
			if !backoff.Sleep(ctx, time.Second) {
				return false
			}
			continue
		}
		claimed := make(map[string]bool, len(entries))
		for _, e := range entries {
			claimed[e.ID] = true
		}
		for _, id := range ids {
			if !claimed[id] {
				// Trimmed or deleted from the stream: nothing to hand
				// out, and nothing will ever ack it.
				s.ack(ctx, topic, id, logger)
			}
		}
		for _, e := range entries {
			if !s.handOut(ctx, topic, e, out, logger) {
				return false
			}
			taken++
		}
	}
}

// handOut sends entry e of topic on out until it is acked, and acks it in
// the group. It reports false when ctx is done first.
func (s *Subscriber) handOut(ctx context.Context, topic string, e goredis.XMessage, out chan<- *message.Message, logger watermill.LoggerAdapter) bool {
	for {
		msg, err := s.unmarshaller.Unmarshal(e.Values)
		if err != nil {
			// As watermill-redisstream does with an entry it cannot
			// read: it stays pending, and nothing after it is handed out.
			logger.Error("unmarshal a pending entry", err, watermill.LogFields{"xid": e.ID})
			return false
		}
		mctx, cancel := context.WithCancel(ctx)
		msg.SetContext(mctx)
		select {
		case out <- msg:
		case <-ctx.Done():
			cancel()
			return false
		}
		select {
		case <-msg.Acked():
			cancel()
			s.ack(ctx, topic, e.ID, logger)
			return true
		case <-msg.Nacked():
			cancel()
			if s.cfg.NackResendSleep > 0 && !backoff.Sleep(ctx, s.cfg.NackResendSleep) {
				return false
			}
		case <-ctx.Done():
			cancel()
			return false
		}
	}
}

// ack acks entry id of topic in the group, trying a few times: an ack that
// fails leaves the entry pending, to be handed out again (a duplicate,
// which the inbox drops).
func (s *Subscriber) ack(ctx context.Context, topic, id string, logger watermill.LoggerAdapter) {
	var err error
	for try := range 3 {
		if try > 0 && !backoff.Sleep(ctx, 100*time.Millisecond) {
			break
		}
		if err = s.client.XAck(context.WithoutCancel(ctx), topic, s.cfg.ConsumerGroup, id).Err(); err == nil {
			return
		}
	}
	logger.Error("ack a taken-over entry", err, watermill.LogFields{"xid": id})
}

// unmarshallerOf returns the unmarshaller of the watermill-redisstream
// configuration rc, or its default.
func unmarshallerOf(rc redisstream.SubscriberConfig) redisstream.Unmarshaller {
	if rc.Unmarshaller != nil {
		return rc.Unmarshaller
	}
	return redisstream.DefaultMarshallerUnmarshaller{}
}

// staleAfter is how long a consumer of the group must have been idle, with
// no entry pending, before a subscription that took the group over deletes
// it: a consumer that reads blocks for BlockTime (100ms) at a time.
var staleAfter = time.Hour

// forgetStale deletes the group's consumers of topic, other than this
// one, that hold no pending entry and have been idle for staleAfter: those
// of subscribers that died (one that closes deletes its own). Each
// subscriber has a consumer name of its own (a random one by default), and
// Redis keeps every consumer a group has had until it is deleted, so
// restarts would pile them up. Failures are logged and otherwise ignored.
func (s *Subscriber) forgetStale(ctx context.Context, topic string, logger watermill.LoggerAdapter) {
	consumers, err := s.client.XInfoConsumers(ctx, topic, s.cfg.ConsumerGroup).Result()
	if err != nil {
		if ctx.Err() == nil {
			logger.Info("list the group's consumers, to delete the stale ones", watermill.LogFields{"error": err.Error()})
		}
		return
	}
	for _, c := range consumers {
		if c.Name == s.cfg.Consumer || c.Pending > 0 || c.Idle < staleAfter {
			continue
		}
		if err := s.client.XGroupDelConsumer(ctx, topic, s.cfg.ConsumerGroup, c.Name).Err(); err != nil {
			logger.Info("delete a stale consumer", watermill.LogFields{"error": err.Error(), "stale_consumer": c.Name})
		}
	}
}

// forgetSelf deletes this subscriber's consumer from the group of each
// topic it subscribed to when the consumer holds no pending entry (one it
// holds is taken over by the group's next subscription, or claimed after
// MaxIdleTime: deleting the consumer would drop it). Close calls it once
// every subscription has ended.
func (s *Subscriber) forgetSelf() {
	s.topicsMu.Lock()
	topics := s.topics
	s.topicsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for topic := range topics {
		n, err := s.client.XPendingExt(ctx, &goredis.XPendingExtArgs{
			Stream: topic, Group: s.cfg.ConsumerGroup, Consumer: s.cfg.Consumer, Start: "-", End: "+", Count: 1,
		}).Result()
		if err != nil || len(n) > 0 {
			continue
		}
		if err := s.client.XGroupDelConsumer(ctx, topic, s.cfg.ConsumerGroup, s.cfg.Consumer).Err(); err != nil {
			s.logger.Info("delete the consumer at close", watermill.LogFields{"error": err.Error(), "topic": topic})
		}
	}
}
