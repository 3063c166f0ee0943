package relay

import (
	"context"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// ClaimRequest is what a relay asks of [Store.Claim].
type ClaimRequest struct {
	// Owner identifies the relay instance that claims: [Relay.Run] draws a
	// new random one each time it starts. Stores that share the outbox
	// between relays (sqlstore.Store) hold their leases under it.
	Owner string

	// Limit is the most messages to return. It is positive.
	Limit int

	// MaxBytes is the most payload bytes to return, counted in ID order; the
	// first message is returned whatever its size, so one large message
	// cannot block the outbox. Zero means no byte limit.
	MaxBytes int64

	// InFlight lists the IDs of messages the caller claimed and has not
	// marked yet: a relay whose store is an [InFlightExcluder] claims its
	// next batch while it publishes and marks the last one. Such a store
	// leaves them out of the batch; other stores never receive it.
	InFlight []int64
}

// Batch is what [Store.Claim] returns: messages the caller may publish now.
type Batch struct {
	// Messages are in outbox ID order. For each aggregate they are the
	// aggregate's oldest pending messages, without gaps (a prefix of what
	// it has pending), so publishing them in order keeps its order.
	Messages []runtime.OutboxMessage

	// Deadline, when not zero, is when the caller's right to publish
	// Messages ends (its lease). The relay stops publishing at Deadline;
	// after it another relay may publish the same messages.
	Deadline time.Time

	// Lost, when not nil, is closed when the store knows that the
	// caller's right to publish Messages ended before Deadline (another
	// relay may take them over: sqlstore.Store closes it when the
	// database session holding the relay's lock ended, when no check of
	// that lock was answered lately (its shards are kept), or when a
	// renewal found shards taken). The relay then stops publishing the
	// batch at once, as at Deadline, marks what was published and leaves
	// the rest pending as it was: no failure is recorded for it (no retry
	// delay, no attempt), since neither it nor the broker failed. Nil:
	// never.
	Lost <-chan struct{}

	// Token is the store's own data about the claim (a fencing token, say),
	// handed back to [Store.Mark] untouched.
	Token any

	// ClaimAgainIn, on an empty batch, is a hint that the caller may have
	// messages to claim sooner than it would look again: the store is
	// handing it a share of the outbox that other relays are giving back
	// (sqlstore.Store, while a relay that just started takes its share
	// over), or a standby's next look for a share to take over.
	// [Relay.Run] then claims again after at most ClaimAgainIn, and it
	// starts listening ([Notifier]) only at its first claim that returns
	// messages or no hint: until then there is nothing a notification
	// would wake it for, and a relay that starts as a standby holds no
	// listening connection until it is handed work. Zero means no hint.
	ClaimAgainIn time.Duration
}

// Outcome is the result of publishing a [Batch], reported to [Store.Mark].
// Every message of the batch is in Published or in Failed.
type Outcome struct {
	// Published lists the IDs of the messages the broker acknowledged.
	Published []int64

	// Failed lists the messages that were not published, in ID order. A
	// message that was not even tried, because an earlier message of its
	// aggregate failed, is listed with that reason; the store records the
	// failed attempt on each aggregate's first failed message only.
	Failed []Failure
}

// Failure is one message that was not published.
type Failure struct {
	// ID is the message's outbox ID.
	ID int64
	// Err says why; never nil.
	Err error
	// Permanent reports that retrying cannot help (the publisher said so
	// with a [runtime.PermanentError]): the store parks the message.
	Permanent bool
	// Transient reports that the broker, not the message, failed (the
	// publisher said so with a [runtime.TransientError]: a partition
	// without a leader, a lost connection): the store delays the
	// message's retry but counts no attempt toward parking it, as for a
	// batch of which nothing could be published. Never set with
	// Permanent.
	Transient bool
	// Lost reports that the message's publish was cut short because the
	// batch's lease ended while the relay was paused, or the store
	// reported the batch lost ([Batch.Lost]): neither the message nor the
	// broker failed. The store releases it as it was claimed, with no
	// retry delay, no attempt and no error recorded, for whichever relay
	// holds its shard now. Transient is set too, so that a store that
	// does not know Lost delays the message without counting an attempt.
	Lost bool
}

// Store is the outbox as the relay sees it. Package runtime/sqlstore provides the SQL
// implementation (sqlstore.Store); runtimetest provides an in-memory one and the
// conformance suite every implementation must pass (runtimetest.TestStore).
//
// The relay calls Claim, publishes the batch with no database transaction
// open, then calls Mark. Implementations must be safe for concurrent use by
// several relays, in one process or many.
//
// # Optional capabilities
//
// Claim and Mark are all a store must have. The relay looks for the rest
// with a type assertion when it starts, each an interface of this package
// (sqlstore.Store has them all; runtimetest.MemoryStore has
// InFlightExcluder, Releaser and a Stats method):
//
//	capability         method                            the relay then
//	InFlightExcluder   ExcludesInFlight() (a marker)     claims the next batch while publishing (ClaimRequest.InFlight)
//	Releaser           Release(ctx, owner)               gives its share back when Run returns
//	HandOverer         HandOver(ctx, owner)              hands its share over after Config.HandOverAfter of failing publishes
//	PeerCounter        OthersAlive(ctx, owner)           cuts a publish short for a hand-over only when a peer can take over
//	ShardHolder        HeldShards(owner)                 logs each change of the shards it holds
//	Notifier           Listen(ctx, notify)               waits for notifications instead of polling
//	NotifyChecker      CanNotify()                       polls from the start when a Notifier cannot notify
//	WakeRequester      RequestWake(ctx, owner)           asks for notifications only while idle
//
// Monitoring reads a Stats(ctx) (Stats, error) method, operators' tools
// Unpark, Discard and DeletePublished (runtimetest.TestStore's Parker,
// Discarder, StatsReader and Retainer), not the relay.
type Store interface {
	// Claim returns pending messages that the caller may publish now (see
	// [Batch]): never a message of an aggregate whose earlier message is
	// still pending and not in the batch, nor one that another owner may be
	// publishing, nor one waiting for its retry time or parked. An empty
	// batch with a nil error means there is nothing to do now.
	Claim(ctx context.Context, req ClaimRequest) (Batch, error)

	// Mark records o: it marks the published messages as such and records
	// a failed attempt on each aggregate's first failed message, delaying
	// its retry (and its aggregate's later messages with it) or parking it.
	// An attempt counts toward parking the message only when the failure
	// is the message's: not when nothing of o was published (the broker is
	// down) and not when the [Failure] is Transient. A Failure that is
	// Lost records nothing: the message is released as it was claimed.
	// A message whose claim the caller no longer holds (its lease passed to
	// another relay) is left as it is. When Mark fails, nothing need be
	// marked: the messages are published again later (at-least-once).
	Mark(ctx context.Context, b Batch, o Outcome) error
}

// InFlightExcluder is implemented by stores whose Claim leaves out the
// messages of [ClaimRequest.InFlight]. After a full batch, [Relay.Run] then
// claims the next batch while it publishes the last one, so a busy relay
// does not wait for its claims: the database runs the claim while the
// relay and the broker work on the publish. After a smaller batch of a
// stream slower than the relay gathers ([Config.CoalesceRows]) it claims
// the next one as soon as the last one is published, before [Store.Mark]
// records it. Either way, when the claim found messages, the
// last batch is marked while the next one is published, so a steady
// stream's messages do not wait for marks either.
//
// Such a claim may return later messages of an aggregate whose earlier
// message is in flight. The relay keeps the aggregate's order: it marks
// the next batch only after the last one's Mark has returned without error
// (when it failed, neither is marked, and both are published again, in
// order), and leaves out of the next batch (unpublished, unmarked, still
// pending) the messages of every aggregate that had a message fail in the
// last batch. When the last
// publish took more than half of the time the next batch had to its
// [Batch.Deadline], the relay drops that batch and claims again.
type InFlightExcluder interface {
	Store
	// ExcludesInFlight marks the store as honouring
	// [ClaimRequest.InFlight]; the relay never calls it.
	ExcludesInFlight()
}

// Releaser is implemented by stores whose claims are leases held by an
// owner. [Relay.Run] calls Release when it stops, so that another relay takes
// its share of the outbox over at once instead of after the lease expires.
type Releaser interface {
	Release(ctx context.Context, owner string) error
}

// HandOverer is implemented by stores that divide the outbox among relays
// (sqlstore.Store). A relay that publishes nothing for
// [Config.HandOverAfter] because its broker fails (it is cut off from the
// broker, say, while other relays are not) calls HandOver, so that relays
// that can publish take its share over instead of waiting behind it:
// leases are renewed by every claim, so they never expire while the relay
// runs and claims.
type HandOverer interface {
	// HandOver gives owner's shards back and unregisters it, as
	// [Releaser.Release] does, when another relay is alive to take them
	// over, and reports whether it did. With no other relay alive it
	// changes nothing and reports false: the owner keeps its shards.
	HandOver(ctx context.Context, owner string) (bool, error)
}

// PeerCounter is implemented by [HandOverer] stores that can tell whether
// a hand-over could happen (sqlstore.Store). While publishing fails, a relay
// cuts each publish short at the time it is due to hand its shards over,
// so that a publish hanging on a cut-off connection cannot put the
// hand-over off; before it does, it asks OthersAlive, once per hand-over,
// and with no other relay alive it lets the publish run its course
// ([Config.PublishTimeout]): a retry the broker would have confirmed is
// not abandoned, and sent again, for a hand-over that cannot happen. A
// HandOverer that is no PeerCounter is taken to have peers.
type PeerCounter interface {
	// OthersAlive returns how many relays other than owner are alive (they
	// could take owner's shards over).
	OthersAlive(ctx context.Context, owner string) (int, error)
}

// ShardHolder is implemented by stores that divide the outbox among relays
// (sqlstore.Store). Run logs each change at INFO ("relay: shards held"), so
// that a takeover, a lease lost or a hand-over shows in the logs of both
// relays.
type ShardHolder interface {
	// HeldShards is how many shards owner holds now.
	HeldShards(owner string) int
}

// Notifier is implemented by stores that can wake the relay when new messages
// are committed (PostgreSQL LISTEN/NOTIFY). Notifications are a hint: the
// relay also polls, so a lost notification delays a message by at most one
// poll interval.
type Notifier interface {
	// Listen blocks, calling notify whenever new messages may be pending,
	// until ctx is done (it then returns ctx.Err()) or the notification
	// channel fails (it returns the error; the relay calls Listen again
	// after a backoff). It calls notify once as soon as it is listening, so
	// messages committed while it was not listening are not missed.
	//
	// A store that implements Listen but cannot notify in its current
	// configuration (SQLite) returns an error wrapping
	// errors.ErrUnsupported at once; the relay then stops calling Listen
	// and polls as it does for a store that is not a Notifier. A store
	// that knows this before Listen is called is also a [NotifyChecker].
	Listen(ctx context.Context, notify func()) error
}

// NotifyChecker is implemented by a [Notifier] store that knows before
// Listen whether it can notify (sqlstore.Store: only on PostgreSQL). When
// CanNotify reports false, [New] treats the store as not a Notifier from
// the start (its default poll interval, its "relay: started" log line).
type NotifyChecker interface {
	// CanNotify reports whether Listen can wait for notifications.
	CanNotify() bool
}

// WakeRequester is implemented by a [Notifier] store whose notifications
// cost the transactions that send them (PostgreSQL serializes the commits
// of transactions that sent a NOTIFY): its writers notify only while some
// relay has asked to be woken, so a busy application pays nothing for
// wake-ups the relay does not need. The relay asks when it goes idle (see
// [Config.ActivePeriod]) and then claims once more before it waits, so a
// message committed while it was asking is not left to the next poll. A
// store whose writers learn of a request with a delay (sqlstore on
// PostgreSQL: up to 100 ms) also notifies once after that delay.
type WakeRequester interface {
	// RequestWake asks for notifications on behalf of owner (the
	// [ClaimRequest.Owner] of its claims) until owner's next claim that
	// returns messages, or its [Releaser.Release]. Asking again while
	// asked is harmless.
	RequestWake(ctx context.Context, owner string) error
}

// Stats is the state of an outbox, for monitoring: the three figures to
// watch are how many messages are pending, how long the oldest has been
// waiting, and how many failed or were parked. Stores report it from a
// Stats(ctx) (Stats, error) method (sqlstore.Store, runtimetest.MemoryStore);
// the relay does not call it.
type Stats struct {
	// Pending counts messages not yet published and not parked.
	Pending int64
	// Retrying counts pending messages with a failed attempt counted
	// against them (attempts > 0). A broker outage, in which nothing could
	// be published, counts no attempt (see sqlstore.Store.Mark), so it
	// does not show here: watch OldestPending.
	Retrying int64
	// Parked counts messages set aside after a permanent failure or too
	// many attempts, until an operator unparks or discards them.
	Parked int64
	// OldestPending is the age of the oldest pending message (zero when
	// none), measured on the store's clock.
	OldestPending time.Duration
}
