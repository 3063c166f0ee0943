// Package relay moves committed outbox messages to a broker: it claims a batch
// from a [Store], publishes it through any Watermill message.Publisher
// (adapters/kafka, or Watermill's AMQP, NATS, SQL, ... publishers), and lets
// the store mark what was published.
//
//	r, err := relay.New(store, publisher, relay.Config{BatchSize: 500})
//	if err != nil {
//		return err
//	}
//	go r.Run(ctx) // returns nil once ctx is cancelled and the batch in flight is done
//
// # Loop
//
// [Relay.Run] claims up to [Config.BatchSize] messages with [Store.Claim]. A
// full batch is followed at once by the next claim; otherwise the relay waits
// for a wake-up: a notification from a store that implements [Notifier]
// (PostgreSQL LISTEN/NOTIFY), a call to [Relay.Notify] (what hooks do after a
// commit on SQLite), or [Config.PollInterval] elapsing, which bounds the delay
// of a message whose notification was lost.
//
// # Delivery: at least once
//
// The relay publishes first and marks second, inside one claim. A message is
// marked only after the publisher accepted it, so a crash, a lost database
// connection or a publisher error between the two leaves it pending, and it is
// published again: consumers must be idempotent (deduplicate on the event id,
// which is the Watermill message UUID and survives every retry). Each such
// failure repeats at most the batch in flight.
//
// When a claim fails and nothing was published, the relay logs it at Warn and
// backs off exponentially ([Config.MinBackoff] to [Config.MaxBackoff]) before
// claiming again. Store and publisher errors never make Run return.
//
// # Poison messages
//
// A message the broker will never take (too large, say) must not stall the
// others. When a topic's Publish fails, the relay probes: it publishes the
// last aggregate's messages on their own, then the first's. If both fail,
// the publisher is down and the whole topic fails. If one succeeds, a message
// is at fault: the relay publishes the other aggregates one at a time, so
// only the bad message's aggregate fails, and goes on without a backoff. The store records a failed attempt
// on each message that was not published; delaying a failed message's retry
// while its aggregate waits behind it, and parking it after too many
// attempts, are the store's business (hooks.Store does both).
//
// # Ordering
//
// Within a batch the relay groups messages by topic and makes one Publish call
// per topic, with the messages in ID order (commit order for one aggregate).
// With the Kafka adapter the key is the aggregate id, so an aggregate's events
// reach their partition in commit order. Topics are published one after the
// other; when one topic fails, the others' messages are still marked, and
// the failed ones are retried in a later batch. There is no order across
// topics: an aggregate whose events go to several topics (a custom topic
// function) is ordered per topic only.
//
// # One relay, several relays
//
// One relay publishes one batch at a time, so with a single relay, and a store
// that claims failed messages again before newer ones, the broker sees each
// topic's messages in ID order, retries included (a retry may repeat messages
// the broker already has, since a publisher may fail halfway). Several relays
// (several processes, for availability or throughput) may run against the
// same store: each claim is exclusive (FOR UPDATE SKIP LOCKED), so no message
// is published by two relays at once, and a store that keeps aggregate order
// skips an aggregate while another relay holds an earlier event of it.
// Ordering then holds per aggregate, not per topic.
//
// # Shutdown
//
// Cancelling Run's context stops the loop after the batch in flight. That
// batch runs on a context detached from the cancellation
// (context.WithoutCancel, values kept), so it is still published and marked;
// [Config.ShutdownTimeout] bounds how long this may take. When it expires,
// the batch's context is cancelled, the relay stops waiting for the
// publisher, and the store releases the claim without marking anything: the
// batch is published again by the next relay, possibly a second time.
//
// # Logs and metrics
//
// Logs go to [Config.Logger] (nil discards them) with constant messages and
// snake_case attributes: topic, outbox_id, messages, error, attempt, backoff.
// [Config.OnBatch] receives a [BatchResult] after every batch, for metrics.
package relay
