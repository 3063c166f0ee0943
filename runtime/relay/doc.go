// Package relay moves committed outbox messages to a broker: it claims a batch
// from a [Store], publishes it through any Watermill message.Publisher
// (adapters/kafka, or Watermill's AMQP, NATS, SQL, ... publishers), and tells
// the store what was published.
//
//	r, err := relay.New(store, publisher, relay.Config{BatchSize: 500})
//	if err != nil {
//		return err
//	}
//	go r.Run(ctx) // returns nil once ctx is cancelled and the batch in flight is done
//
// # Loop
//
// Each round of [Relay.Run] has three steps, none of which holds a database
// transaction open across the others:
//
//  1. [Store.Claim] returns a [Batch] of up to [Config.BatchSize] messages and
//     [Config.MaxBatchBytes] payload bytes ([ClaimRequest]), claimed under an
//     owner string that Run draws at random each time it starts.
//  2. The relay publishes the batch: one Publish call per topic, with the
//     topic's messages in ID order, up to [Config.PublishConcurrency] topics
//     at the same time.
//  3. [Store.Mark] receives the [Outcome]: which messages were published and
//     which failed, and why ([Failure]).
//
// A full batch (BatchSize messages, or MaxBatchBytes bytes) is followed at
// once by the next claim. With a store that is an [InFlightExcluder], that
// claim runs while the batch is published, and the batch is marked while
// the next one is published: a busy relay's round lasts the longer of the
// publish and the store's mark-then-claim, not their sum. A smaller batch
// of a stream slower than the relay gathers (below, about 2,000 messages a
// second by default) is followed, as soon as it is published, by a claim
// that leaves it out, and when that claim finds messages the batch is
// marked while they are published: such a stream's messages wait for a
// claim and a publish, not for the mark of the batch before. If such a mark
// fails, the batch published beside it is not marked either, so both go
// out again, in order. While messages keep coming (for
// [Config.ActivePeriod], 100ms, after a claim that found some) the relay
// claims again every [Config.ActivePollInterval], 2ms: a busy application's
// messages are picked up within that without any transaction having to wake
// the relay. A fast stream is gathered into larger batches instead of
// claimed a few messages at a time: after a partial batch of at least
// [Config.CoalesceRows] (8) messages the relay waits ActivePollInterval for
// every 8 messages it found, at most [Config.CoalesceMax] (10ms), so that
// its rounds, on the machine and the database the writers use, cost them
// no more than a relay polling every 10ms would. Once idle, the relay asks a [WakeRequester] store to have the
// next writer wake it (PostgreSQL: a NOTIFY, sent only while a relay asked
// for one, because a NOTIFY serializes commits), claims once more, and waits
// for a wake-up: a notification from a store that implements [Notifier], a
// call to [Relay.Notify] (what hooks do after a commit in the relay's own
// process), or [Config.PollInterval] elapsing, which bounds the delay of a
// message whose notification was lost. [Config.OnBatch] sees every batch.
//
// # Wire format
//
// Each message's UUID is the event id and its payload the event's JSON. Its
// metadata is the native wire contract ([runtime.Envelope.Metadata]) or,
// with [Config.CloudEvents], the attributes of a CloudEvent 1.0 in binary
// content mode ([runtime.CloudEvents.Metadata]: ce_id, ce_type, ce_source,
// ce_time, ...). The choice is per relay; runtime/consumer reads both.
//
// # Delivery: at least once
//
// The relay publishes first and has the store mark second. A crash, a lost
// database connection, a failed Mark or an abandoned publish between the two
// leaves messages pending that the broker may already have, and they are
// published again: consumers must be idempotent (deduplicate on the event id,
// which is the Watermill message UUID and survives every retry). Each such
// failure repeats at most the batches in flight: two when the relay marks a
// batch while it publishes the next.
// Each aggregate's messages are published again from its first unmarked
// event on, in order, with the same event ids. runtime/consumer
// deduplicates for you, with an inbox written in the handler's transaction
// (exactly-once effects).
//
// One more kind of duplicate comes from the network: a write held up in a
// stalled connection (a proxy that buffers, a partition that heals while
// TCP still retransmits) can reach the broker after the relay's retry of it
// and after the aggregate's later events, so a consumer sees that event a
// second time, out of place (... 24 25 ... 39 24 40, seen through a freezing
// proxy). NATS JetStream, SQS and Redis drop it (they deduplicate by event
// id; the Redis publisher for its DedupWindow, 10 minutes by default:
// TestStalledConnection in adapters/redis reproduces the stall through a
// freezing proxy); on Kafka (kafka-go has no idempotent producer) and
// RabbitMQ the inbox drops it, so effects stay exactly once and in order,
// and a consumer without one must skip events it has already applied.
//
// # Deadlines and leases
//
// Every call has a deadline, so a half-open connection or a hung broker
// cannot stall the relay: each store call ([Store.Claim], [Store.Mark],
// [Releaser.Release]) gets [Config.StoreTimeout]; publishing a batch gets
// [Config.PublishTimeout], and stops sooner at the batch's lease,
// [Batch.Deadline], after which the store may hand the same messages to
// another relay. At the deadline the messages' contexts are cancelled and the
// relay stops waiting for the publisher (a publisher that ignores the
// context is abandoned, not waited for); the messages not acknowledged by
// then count as failed, and are published again later.
//
// When Run stops, a store that implements [Releaser] is asked to release
// the owner's claims, so another relay takes them over at once rather than
// when the lease ends.
//
// # Outages cost seconds, not minutes
//
// While nothing can be published no message's retry delay grows, so the
// backlog goes out within a few seconds of the broker's return. Because
// every call has a deadline (and so has a consumer's inbox transaction,
// consumer.Config.TxTimeout), a half-open connection fails a call, which is
// retried on a new connection, instead of stalling the relay or a
// partition: sqlstore.Store discards a connection whose call timed out and
// pings one idle for over a second (500 ms deadline) before it uses it, so
// every connection frozen at once costs the relay about one StoreTimeout
// (TestHalfOpenConnectionsCostOneStoreTimeout: resumed 1.0 – 1.5 s after
// the freeze with a 2-s StoreTimeout; 6.7 – 8 s before).
//
// On MySQL/MariaDB give the relay's DSN readTimeout and writeTimeout (about
// StoreTimeout, e.g. ?readTimeout=10s&writeTimeout=10s; outbox relay sets
// both to 10s unless its mysql:// URL does): go-sql-driver/mysql's COMMIT
// and ROLLBACK take no context, so without them a relay whose connection
// turned half-open inside a lease transaction waits for TCP to give up (the
// correctness suite's relays use them; without them it saw a relay stuck 16
// s in one run of five). The server side is guarded too: the lease
// transaction carries a server timeout of half a lease
// (idle_in_transaction_session_timeout on PostgreSQL, the session's
// wait_timeout on MySQL, kept until the COMMIT has been answered), so the
// server ends a frozen relay's transaction and the other relays take its
// shards over when its lease runs out.
//
// A relay cut off from its broker alone still reaches its database and
// renews its leases, so they never expire: after [Config.HandOverAfter] it
// hands its shards over, logs "relay: handed its shards over", claims
// nothing for as long again, and then joins as a standby.
// TestRelayCutOffFromItsBrokerHandsOver (adapters/cmd/outbox) runs two
// outbox relays with the defaults on PostgreSQL and RabbitMQ and holds
// every byte between the active one and RabbitMQ: it hands over 15.0 s after
// the first event it could not publish, and the standby publishes all 61
// events in order per aggregate (without hand-overs: 1 of 61 in 90 s). The
// correctness suite's brokercut fault does the same to the active relay
// process (Kafka, LeaseTTL and HandOverAfter 2 s, 5 – 6 s cut, the held
// bytes delivered late at the end): probes on every shard published 2.2 s
// after the cut, bound 4.7 s, all 64 shards moved; without hand-overs 5.4 s,
// after the cut healed, and no shard moved.
//
// # Fencing
//
// A relay that lost its lease has no write reach the broker after its
// successor's. The relay gives every publish the end of its lease as the
// messages' deadline ([Batch.Deadline], which sqlstore.Store sets a tenth
// of LeaseTTL before the database lets another relay take the shards) and
// stops waiting then, logging "relay: the lease ended during a publish"
// (not a broker outage: no hand-over follows, and what the lease's end cut
// short is left pending as it was, with no failure recorded, while what
// went out before is marked). What the broker client still
// holds is the adapter's to stop, and it differs by broker (the "fenced"
// column of the table in package adapters/broker):
//
//   - Kafka: kafka-go goes on writing the batches of a call whose context
//     ended, from goroutines of its own, so a relay paused mid-publish
//     (SIGSTOP, a frozen VM) had them land after its successor's writes of
//     the same aggregates when it woke (a new user's trial: 1 – 7 stale
//     records in 5 of 6 runs). The adapters/kafka Publisher now dials
//     through a gate that refuses any produce request written after the
//     deadline of the calls made through it (and aborts the connection, so
//     the broker never gets it whole), and retires its writers the moment a
//     call is abandoned: their connections are aborted with SO_LINGER 0,
//     which drops what the kernel still held to send, and new writers serve
//     the next call (TestAbandonedPublishNeverLands fails without it: 5 of 5
//     stale records landed). Left open: bytes handed to the kernel before
//     the deadline that the network holds past it (a partition that heals
//     after the lease ended while the process is frozen too), and a write
//     that passed the check in the microseconds before the process froze.
//   - NATS JetStream, SQS and Redis drop a late write of an event their
//     deduplication window (10 min, 5 min, 10 min) has seen, and the
//     successor publishes from the first unmarked event on, so a stale write
//     either lands before the successor's copy (in order) or is dropped.
//   - RabbitMQ (amqp://): the adapters/amqp Publisher's connection is fenced
//     the same way, on AMQP's frames (a basic.publish or content frame after
//     the deadline is refused and the connection aborted;
//     TestPublishPastItsDeadlineNeverReachesTheBroker); on amqps:// amqp091
//     does the TLS above the connection, so the fence sees no frames and a
//     consumer there uses the inbox (runtime/consumer), which applies each
//     event once and in order.
//   - The SQL broker writes each batch with one INSERT under the publish's
//     context, which database/sql does not send once the context has ended
//     (PostgreSQL runs it as soon as it arrives).
//
// # Per-message results
//
// A publisher that knows per message what the broker did (adapters/kafka, for
// a write that failed on some partitions only) returns [runtime.PublishErrors]: exactly
// the acknowledged messages are marked as published, and only the others are
// published again. A message's error that is a [runtime.PermanentError]
// (too large for the broker, say) is reported as [Failure.Permanent].
//
// When the publisher returns one error for a whole topic, the relay probes
// whether the publisher or a message is at fault: it publishes the last
// aggregate's messages on their own, then the first's. If both fail with an
// error that is not permanent, the publisher is down and the whole topic
// fails. Otherwise a message is at fault: the relay publishes the other
// aggregates one at a time, and the failing aggregate message by message, so
// that only the bad message and the messages after it in its aggregate fail.
// Messages a failed call did write may be written twice.
//
// # Outages and partial failures
//
// A batch fails as a whole when the store returns an error, or when nothing
// could be published for a reason other than messages rejected for good: the
// broker or the database is down for everyone. The relay then logs it at
// Warn and backs off exponentially ([Config.MinBackoff] to
// [Config.MaxBackoff]) before claiming again. A batch of which some messages
// were published is a partial failure: the publisher works, the failed
// messages wait in the store, and the relay goes on at full speed. Store and
// publisher errors never make Run return.
//
// # Poison messages are the store's business
//
// The relay reports each failure; what follows is up to the store. The store
// records a failed attempt on each aggregate's first failed message and
// holds that aggregate's later messages back behind it. sqlstore.Store, and
// runtimetest.MemoryStore with the same policy, delay the message's retry
// with a growing delay,
// counting attempts only in batches where other messages were published (an
// outage is no message's fault), and parks it after a permanent failure or
// too many attempts. A parked message holds its aggregate back, to keep the
// aggregate's order, until an operator unparks it (sqlstore.Store.Unpark) or
// discards it; the other aggregates go on.
//
// # Ordering
//
// For each aggregate, a batch holds the aggregate's oldest pending messages
// without gaps (see [Batch]). The relay publishes each topic's messages in
// ID order, in one call, and when it has to find a bad message it stops an
// aggregate at its first failure, so nothing after it is published ahead of
// it. (Per-message results are taken as the publisher gives them: a broker
// that orders by key, as Kafka does by partition, takes or refuses one
// aggregate's messages together.) With the Kafka adapter the key is the
// aggregate id, so an aggregate's events reach their partition in commit
// order, retries included (a retry may repeat messages the broker already
// has). The order holds across topics too: when an aggregate's events go
// to several topics (a custom topic function), a batch is published in
// stages, an event only after its aggregate's earlier event bound for
// another topic was acknowledged, and behind it when that one failed or is
// parked. A batch whose messages share one topic per aggregate (the
// default: the topic is the aggregate type) is one stage.
// (TestRunKeepsAnAggregatesOrderAcrossTopics; until 2026-12-02 the later
// event went out in the same batch.)
//
// # One relay, several relays
//
// Several relays (several processes, for availability, or throughput when
// the broker limits one) may run against the same store; sqlstore.Store has
// one of them publish and the others stand by unless
// sqlstore.StoreConfig.MaxActiveRelays allows more. A store that shares the outbox (sqlstore.Store) gives
// each owner its own messages under a lease: no message is published by two
// relays at once while the lease holds, no relay gets an aggregate's later
// messages while another holds its earlier ones, and a stopped, hung or
// killed relay's share passes to another one when it releases it or when
// the lease ends.
//
// # Shutdown
//
// Cancelling Run's context stops the loop after the batch in flight, and
// Run waits for the mark of the batch before it when that runs in the
// background. That batch runs on a context detached from the cancellation
// (context.WithoutCancel, values kept), so it is still published and marked;
// [Config.ShutdownTimeout] bounds how long this may take. When it expires,
// the batch's context is cancelled (the publisher's message contexts and
// the store's calls with it), the relay stops waiting for the publisher, and
// nothing of the batch is marked: it is published again by the next relay,
// possibly a second time. Run then releases its claims
// ([Releaser]), stops listening, and returns nil.
//
// # Logs and metrics
//
// Logs go to [Config.Logger], slog.Default() when it is nil, with constant
// messages and snake_case attributes (the keys are listed in package
// runtime's documentation, under Logs). Warn: "relay: publish failed" (one line per distinct
// error, naming the first failed message: outbox_id, topic, event_id,
// event_type, messages, published, permanent, error, attempt, and backoff
// when the relay backs off), "relay: batch failed" (the store failed: error, claimed,
// published, attempt, backoff), "relay: listen failed", "relay: wake
// request failed, polling" (once per streak of failures; Debug for the
// rest of the streak, Info when a request succeeds again), "relay: release
// failed", "relay: shutdown timeout exceeded, batch released", "relay:
// handed its shards over to the other relays: nothing it claimed could be
// published" (owner, for, stand_aside: see [Config.HandOverAfter]),
// "relay: hand-over failed; keeping the shards". Info:
// "relay: nothing published for a while, and no other relay is alive to
// take the shards over; keeping them" (owner, for) when a hand-over finds
// no relay to take the shards, "relay: stood aside; claiming again" after
// a hand-over's stand-aside, start
// and stop (notifier=false for a store that polls), each change in the
// shards a relay holds ("relay: shards held": shards, was — a standby
// taking over, a lease lost), "relay: standing by" once when a relay's
// first claim finds every shard held by other relays, and a store whose Listen
// reported it cannot notify. Debug: each published batch.
// [Config.OnBatch] receives a [BatchResult] after every batch, for metrics:
// the claimed messages (topic, event type, CreatedAt), which failed, and
// when publishing ended (adapters/metrics turns it into Prometheus metrics,
// commit-to-publish lag included). [Relay.LastProgress] tells a health
// check (runtime/health) when the relay last made progress.
//
// # Troubleshooting
//
// Nothing is published and nothing is logged: with no broker, the relay logs
// "relay: publish failed ... connection refused" at Warn on slog.Default()
// once per try (the line is shown in package runtime's documentation, under
// Logs), within a fraction of a second of the start, and again at each try. While
// the broker is down the events that failed wait
// sqlstore.StoreConfig.RetryDelay (1 s) between tries, a delay that does
// not grow (an outage counts no attempt against an event, and attempt
// counts the relay's consecutive failed rounds, so it reads 1 when the
// events waited in between); the relay's own backoff, which grows up to
// [Config.MaxBackoff] (5 s), applies when the database fails or a round
// publishes nothing (a broker outage: backoff=93ms ... 4.7s in the log), so
// the backlog goes out within about MaxBackoff of the broker's return. A
// RabbitMQ that refuses the password answers only after about 3 s, so each
// try then takes that long (broker.Open, and so outbox relay, refuses such
// a URL at start; amqp.Publisher.Connect checks at start in your own
// program, its error wrapping amqp.ErrAccessRefused). If you see nothing, a
// discard logger or a level above Warn was configured; also check the
// store's Stats: a growing OldestPending means the relay cannot publish.
package relay
