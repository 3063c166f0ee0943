package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// StoreConfig configures a [Store]. The zero value is a valid configuration.
type StoreConfig struct {
	// Dialect is the database's dialect. Default: [DialectOf] the
	// *sql.DB, which knows the usual drivers; set it for another driver
	// (an instrumenting wrapper, say).
	Dialect Dialect

	// Table is the outbox table; it must match the writer's (the GORM
	// plugin's Config.Table). Default: [DefaultTable].
	Table string

	// RetryDelay is how long a message that failed to publish waits before
	// it is claimed again. While other messages are being published (so
	// the failure is the message's, or its partition's), the delay doubles
	// with each failed attempt, up to MaxRetryDelay; while nothing can be
	// published (the broker is down for everyone) it stays at RetryDelay
	// and no attempt is counted, so recovery after an outage takes
	// seconds. Its aggregate's later messages wait behind it, so the
	// aggregate's order holds; other aggregates go on. The schedule is
	// computed with the database's clock (the process's on SQLite).
	// Default: 1s.
	RetryDelay time.Duration

	// MaxRetryDelay caps RetryDelay's doubling. Default: 30s.
	MaxRetryDelay time.Duration

	// MaxAttempts parks a message after this many failed attempts counted
	// as above. A failure the publisher classes as the broker's
	// ([runtime.TransientError], see relay.Failure.Transient: a Kafka
	// partition without a leader, a lost connection; each adapter's
	// package doc lists its classes) counts no attempt either, however
	// long it lasts: it delays the retry by RetryDelay, like an outage,
	// and never parks the message. A failure nobody classified counts, so
	// a message that keeps failing for an unknown reason is still set
	// aside at MaxAttempts. A message whose failure the publisher marks permanent
	// ([runtime.PermanentError]: too large for the broker, say) is parked
	// at its first failure whatever MaxAttempts says. A parked message is
	// set aside for an operator with its last_error and parked_at, and it
	// holds its aggregate's later messages back, so the aggregate's order
	// holds whatever happens: [Store.Unpark] puts it back in the queue
	// (it is then published before the aggregate's later messages), and
	// [Store.Discard] drops it (the later messages then go out). Other
	// aggregates are never held back. Default: 0, never park for
	// transient failures.
	MaxAttempts int

	// LeaseTTL is how long a relay's claim on its share of the outbox
	// lasts without renewal. Relays renew their leases, and rebalance the
	// shards between the active relays (see MaxActiveRelays), every
	// LeaseTTL/5 but at least every second while they run, so a relay that
	// stops (killed, paused, cut off from the database) has its share taken
	// over by the others within LeaseTTL plus a renewal interval (a
	// standby's look, 250ms) and a poll; a relay that stops cleanly hands it
	// over at once. A relay stops publishing at the end of its lease: the
	// batch's Deadline, a tenth of LeaseTTL before the database lets
	// another relay take the shards, is the publish's deadline, and the
	// adapters that fence (see the README's broker table: Kafka,
	// RabbitMQ over amqp://) let no write of it reach the broker after
	// that. Default: 15s.
	//
	// On PostgreSQL and MySQL/MariaDB a relay whose process dies (killed,
	// crashed, its host gone: its database session ends) is replaced
	// sooner: each relay holds a session lock on a connection of its own
	// (see LeaseExpiryOnly), and another relay that finds it free twice,
	// 750ms apart, takes the shards over: within about 1s (a look, 250ms,
	// and the 750ms grace) plus a poll of the process's death. The relay
	// whose session ended while its process lives (the server killed the
	// session, its connection broke) checks its session every 200ms with a
	// deadline of 500ms and stops publishing when the check fails
	// (relay.Batch.Lost), within 700ms, before the grace has passed. A
	// relay that is paused or cut off from the database keeps its session
	// and is taken over only when its lease expires, as above. On SQLite,
	// whose locks are the file's, leases only expire.
	LeaseTTL time.Duration

	// LeaseExpiryOnly turns the session lock off (see LeaseTTL): a relay
	// whose process dies is then taken over once its leases expire. Each
	// running relay's lock holds one connection of the pool for as long as
	// it runs, so a store whose pool is bounded below 3 connections
	// (SetMaxOpenConns(1) or (2): the lock's, the wake-up listener's and
	// one for the statements) takes no lock, as with LeaseExpiryOnly. A
	// connection pooler that hands a client's statements to different
	// server sessions (PgBouncer in transaction mode) cannot keep a session
	// lock: set it there. Relays of an outbox may differ in it. Default:
	// false, hold the lock (PostgreSQL and MySQL/MariaDB).
	LeaseExpiryOnly bool

	// DeletePublished deletes each row once its message is published,
	// instead of keeping it with published_at set until retention deletes
	// it. The mark is then a DELETE, about three times cheaper than the
	// UPDATE on PostgreSQL (the relay drains about 1.4 times faster, see
	// the README's Performance), and the table holds only pending, retrying
	// and parked rows, so no retention is needed for the outbox. What it
	// gives up: [Store.Replay] and the published views of [Store.Entries]
	// find nothing, and a writer that saves an event again after its row
	// was published and deleted (an application retrying a save whose
	// commit failed but went through) writes and publishes it a second
	// time, where the kept row would have deduplicated it; consumers that
	// keep an inbox (package runtime/consumer) still apply it once.
	// Default: false, keep published rows.
	DeletePublished bool

	// MaxActiveRelays is how many relays at most hold shards and publish
	// at once. The others stand by: they hold no lease, claim nothing and
	// ask writers for no wake-up, look every 250ms for shards nobody
	// holds (one read; their renewal, a durable transaction, runs every
	// LeaseTTL/5 but at least every second), and take the shards over
	// when an active relay stops (within 250ms when it releases them; when
	// its process dies, within about 1s on PostgreSQL and MySQL/MariaDB,
	// once they have found its session lock free twice 750ms apart, see
	// LeaseTTL, and once its leases expire on SQLite, with LeaseExpiryOnly,
	// or when it is paused or cut off from the database). The active
	// relays keep an even share each. The relays that hold the most
	// shards stay active, so a relay that starts beside running ones
	// stands by. Run every relay of an outbox with the same setting: a
	// standby takes the shards that the relays above it leave free for
	// max(1s, LeaseTTL/5) (relays of an earlier version share the shards
	// with every relay alive), so none stays unpublished, but then more
	// relays publish than the setting says.
	//
	// One active relay is the default because the database, not the
	// relay, is what a busy outbox usually waits for, and relays that
	// share the shards cost it more per event: each marks rows
	// interleaved on the same pages with the others', and each claim
	// reads past the others' rows. On the README's 2-core machine (see
	// its Performance) PostgreSQL spent 8.4 ms of CPU per 1,000 events
	// drained by one relay, 11.0 ms by 2 sharing relays and 13.8 ms by 4,
	// which drained no faster than one; with one active relay and the
	// others standing by, 8.4 and 8.6 ms. Set it higher when the round
	// trips to the broker, not the database, limit one relay (a distant
	// broker, or one that confirms message by message) and the database
	// and the broker have cores to spare, and measure: on that machine,
	// where all of them share two cores, 2 sharing relays drained 0.96 –
	// 1.17× of one, depending on the broker. [Shards] or more lets every
	// relay alive take an even share.
	// Either way each aggregate is published by one relay at a time, in
	// order. Default: 1.
	MaxActiveRelays int
}

func (c *StoreConfig) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = 30 * time.Second
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.MaxActiveRelays == 0 {
		c.MaxActiveRelays = 1
	}
}

// Validate reports whether the configuration is usable: an error wrapping
// [ErrInvalidConfig] (or [ErrInvalidTable]) names the field it rejects.
func (c StoreConfig) Validate() error {
	switch {
	case c.RetryDelay < 0 || c.MaxRetryDelay < 0 || c.MaxAttempts < 0 || c.LeaseTTL < 0 || c.MaxActiveRelays < 0:
		return fmt.Errorf("%w: store: RetryDelay, MaxRetryDelay, MaxAttempts, LeaseTTL and MaxActiveRelays must not be negative", ErrInvalidConfig)
	case c.LeaseTTL > 0 && c.LeaseTTL < 100*time.Millisecond:
		return fmt.Errorf("%w: store: LeaseTTL %v is shorter than 100ms", ErrInvalidConfig, c.LeaseTTL)
	case c.Table != "":
		return CheckTable(c.Table, MaxOutboxTableName)
	}
	return nil
}

// Store is the outbox table as the relay (package runtime/relay) sees it. It
// implements [relay.Store], [relay.Releaser] and, on PostgreSQL,
// [relay.Notifier] (LISTEN/NOTIFY).
//
// # Sharing the outbox between relays
//
// Every row carries its aggregate's shard (one of [Shards], by hash), and
// the active relays (at most [StoreConfig.MaxActiveRelays], default 1, of
// the relays alive in <table>_relays) divide the shards between them
// through leases in a small table (<table>_leases), each taking an even
// share; the others stand by. A relay reads and publishes only the pending rows of its
// own shards, so one aggregate is published by one relay at a time, in
// order, with no row locks and no transaction open while it publishes:
// claiming is one SELECT, marking one UPDATE, and the lease bookkeeping a
// short transaction every LeaseTTL/5. Marks are fenced: a relay that lost a
// shard (it was paused past its lease, say) cannot mark that shard's rows.
// Relays that start or stop rebalance the shards within a few seconds, and
// a standby takes over the shards of an active relay that stops. The same
// holds on SQLite, whose transactions are serialised, also across
// processes.
//
// # What a claim returns
//
// The pending rows of the relay's shards in id order (for each aggregate, in
// commit order: see [Writer]), up to the row and byte limits, leaving out
// every aggregate that has a message waiting for its retry or parked, so a
// failing aggregate holds back only itself.
//
// A Store is safe for concurrent use.
type Store struct {
	db      *sql.DB
	dialect dialect
	table   string
	tables  storeTables
	lease   leaseOps
	cfg     StoreConfig
	// wake holds the dialect's wake-up statements (see dialect.wakeSQL),
	// built once.
	wake struct{ request, cancel string }
	// listening is the notify function of a running Listen, or nil.
	listening atomic.Pointer[func()]

	mu     sync.Mutex
	owners map[string]*ownerLease

	// partitioned is 0 until the first mark has asked the database
	// whether the table is partitioned (PostgreSQL), then 1 (no) or 2 (yes).
	partitioned atomic.Int32
	// largeRows is set while claims meet payloads larger than a claim's
	// byte cap over its limit: claims then count bytes in the database
	// (see selectClaimable).
	largeRows atomic.Bool

	// seenLocked holds, for each other owner whose session lock this
	// store has seen held, zero while it is, or since when it has been
	// seen free (see lookAtLocks). Guarded by locksMu.
	locksMu    sync.Mutex
	seenLocked map[string]time.Time

	// connUsed records when the store last used each pooled connection
	// (by driver connection; see conn). Guarded by connsMu.
	connsMu  sync.Mutex
	connUsed map[any]time.Time

	inRenew func() // tests only: called inside the lease transaction, before it commits
}

// ownerLease is what a Store knows of one relay's leases.
// HeldShards returns how many of the outbox's shards owner (a relay's
// [relay.ClaimRequest.Owner]) holds as of its last claim or renewal: all
// of them for the only active relay, none for a standby. The relay logs
// each change.
func (s *Store) HeldShards(owner string) int {
	s.mu.Lock()
	o := s.owners[owner]
	s.mu.Unlock()
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.shards)
}

type ownerLease struct {
	// claimMu serializes the owner's claims, wake-up requests and release.
	claimMu sync.Mutex

	mu     sync.Mutex // guards the fields below
	shards []int16    // sorted; replaced, never modified in place
	// claimable are the shards claims read: shards less those leaving
	// (see givingBack). Replaced, never modified in place.
	claimable  []int16
	validUntil time.Time // local clock, conservative
	nextRenew  time.Time
	alive      int  // relays alive at the last renewal
	short      bool // holds less than its share: taking shards over
	standby    bool // outranked by MaxActiveRelays others: holds no shard
	// nextLook is when a standby's claim next looks for shards nobody
	// holds (one read), to renew, and take them, at once.
	nextLook time.Time
	// freeSince is when a standby's looks began to find shards nobody
	// holds (zero while they find none). Shards that stay free for
	// rescueAfter are ones the relays that outrank it leave, and it takes
	// them: rescued.
	freeSince time.Time
	// rescued is set while an outranked owner holds shards that the relays
	// above it left free: it keeps them rather than stand by.
	rescued bool
	// takeEvery is how soon a short owner renews again to take shards
	// over: minTakeEvery after a renewal that took some and for
	// minTakeTries renewals after that took none (takeTries counts them),
	// then doubling after each, up to maxTakeEvery.
	takeEvery time.Duration
	takeTries int
	waiting   bool // RequestWake asked writers to notify for the owner
	// lastClaimed is how many rows the last claim found: the next claim's
	// first guess of its size.
	lastClaimed int
	// renewing is closed when the renewal running in the background ends;
	// nil when none runs. cancelRenew ends it (the session lock ended: it
	// may hang on a connection cut off with the lock's).
	renewing    chan struct{}
	cancelRenew context.CancelFunc
	// giveBack is set by a background renewal that found the owner holding
	// more than its share, or by a claim that saw more active relays than
	// the last renewal: the next claim renews in line, and gives the
	// surplus back (a background renewal never gives shards back, since a
	// batch of them may be in flight).
	giveBack bool
	// released is set by Release: no background renewal starts after it.
	released bool
	// lock is the owner's session lock (see session.go), or nil.
	lock *ownerLock
	// ghost is the session id of the owner's last lock, which ended on
	// the owner's side: the next lock ends it if it still holds the lock.
	ghost int64
	// relock is set when the session lock ended: the next renewal takes a
	// lock again and gives the owner's rows back first, as a relay that
	// starts.
	relock bool
	// lost is closed when the owner's batches claimed so far may no
	// longer be published (relay.Batch.Lost), and replaced.
	lost chan struct{}
	// loss is the last loss of shards, until LeaseLost reports it.
	loss *leaseLoss
	// leaseEnd is when the leases written by the last renewal expire, on
	// the local clock (about: the database's clock writes them).
	leaseEnd time.Time
	// last is the last batch the owner claimed: when the next claim
	// lists it as in flight (the relay claims ahead while it publishes and
	// marks it), its shards are not given back, since the batch's mark is fenced by the
	// lease: a shard given back before the mark would leave its published
	// rows pending, and the next owner would publish them again.
	last []runtime.OutboxMessage
}

// claimToken is the Token of the batches a Store returns.
type claimToken struct{ owner string }

// ExcludesInFlight implements [relay.InFlightExcluder]: Claim leaves out
// [relay.ClaimRequest.InFlight], so the relay claims its next batch while
// the store marks the last one.
func (s *Store) ExcludesInFlight() {}

var (
	_ relay.InFlightExcluder = (*Store)(nil)
	_ relay.Store            = (*Store)(nil)
	_ relay.Releaser         = (*Store)(nil)
	_ relay.HandOverer       = (*Store)(nil)
	_ relay.Notifier         = (*Store)(nil)
	_ relay.WakeRequester    = (*Store)(nil)
)

// NewStore returns a store on db's connection pool (GORM users pass
// db.DB()). The dialect is cfg.Dialect, or [DialectOf] db. It returns an
// error wrapping [ErrInvalidTable] or [ErrUnsupportedDialect] for a bad
// table name or dialect.
func NewStore(db *sql.DB, cfg StoreConfig) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("sqlstore: store: %w", errNilDB)
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dialect == "" {
		var err error
		if cfg.Dialect, err = DialectOf(db); err != nil {
			return nil, fmt.Errorf("sqlstore: store: %w", err)
		}
	}
	d, err := sqlOf(cfg.Dialect)
	if err != nil {
		return nil, err
	}
	t := tablesOf(cfg.Table)
	s := &Store{
		db: db, dialect: d, table: cfg.Table, tables: t, lease: d.leases(t), cfg: cfg,
		owners: map[string]*ownerLease{}, seenLocked: map[string]time.Time{},
	}
	s.wake.request, s.wake.cancel = d.wakeSQL(t)
	return s, nil
}

// Close releases the leases of every relay that claimed through this store,
// so other relays take their shards over at once. The store stays usable. It
// does not close the database.
func (s *Store) Close() error {
	s.mu.Lock()
	owners := make([]string, 0, len(s.owners))
	for o := range s.owners {
		owners = append(owners, o)
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, o := range owners {
		errs = append(errs, s.Release(ctx, o))
	}
	return errors.Join(errs...)
}

func (s *Store) owner(name string) *ownerLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.owners[name]
	if o == nil {
		o = &ownerLease{lost: make(chan struct{})}
		s.owners[name] = o
	}
	return o
}

const selectColumns = "id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, created_at, attempts"

// Claim implements [relay.Store]: it returns the claimable rows of the
// owner's shards, renewing its leases, and taking or giving back shards,
// when due. Renewals run in the background, beside the claims, while the
// owner's lease has more than half of LeaseTTL left; a claim renews in
// line, before it reads, only when the lease is shorter than that (or
// gone: the first claim), to give shards back, or when the owner holds no
// shard. The batch's Deadline is the end of the owner's lease.
func (s *Store) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	if req.Limit <= 0 {
		return relay.Batch{}, fmt.Errorf("sqlstore: claim: limit %d must be positive", req.Limit)
	}
	if req.Owner == "" {
		return relay.Batch{}, errors.New("sqlstore: claim: empty owner")
	}
	o := s.owner(req.Owner)
	o.claimMu.Lock()
	defer o.claimMu.Unlock()
	s.lookForFreeShards(ctx, req.Owner, o)
	if err := s.renewWhenDue(ctx, req.Owner, o, req.InFlight); err != nil {
		return relay.Batch{}, err
	}
	o.mu.Lock()
	shards, validUntil, sizeHint, lost := o.claimable, o.validUntil, o.lastClaimed, o.lost
	if len(shards) == 0 {
		again := s.claimAgainIn(o)
		o.mu.Unlock()
		return relay.Batch{ClaimAgainIn: again}, nil
	}
	o.mu.Unlock()
	msgs, alive, err := s.selectClaimable(ctx, shards, req.InFlight, req.Limit, req.MaxBytes, sizeHint)
	if err != nil {
		return relay.Batch{}, err
	}
	o.mu.Lock()
	o.lastClaimed, o.last = len(msgs), msgs
	// An empty claim has no row to carry the count of relays alive.
	if m := s.cfg.MaxActiveRelays; len(msgs) > 0 && min(alive, m) != min(o.alive, m) {
		// A relay joined or left, and the active relays' share changed:
		// rebalance at the next claim rather than at the next scheduled
		// renewal, so a relay that starts beside a busy one gets its
		// share within a claim or two. One that joined makes the owner's
		// share smaller: the next claim renews in line, and gives shards
		// back. (A relay that joins or leaves as a standby changes no
		// share, and costs the busy relay no renewal.)
		o.nextRenew = time.Now()
		o.giveBack = o.giveBack || alive > o.alive
	}
	waiting := o.waiting && len(msgs) > 0
	if waiting {
		// Cleared before the register is, so that a renewal that
		// extends the request (under o.mu) either comes first or sees
		// that the owner no longer waits.
		o.waiting = false
	}
	o.mu.Unlock()
	if len(msgs) == 0 {
		return relay.Batch{}, nil
	}
	if waiting {
		// The relay found messages: it polls again before it waits. A
		// failure only leaves writers notifying until the next claim that
		// finds messages.
		if _, err := s.db.ExecContext(ctx, s.wake.cancel); err != nil {
			o.mu.Lock()
			o.waiting = true
			o.mu.Unlock()
		}
	}
	return relay.Batch{Messages: msgs, Deadline: validUntil, Lost: lost, Token: claimToken{req.Owner}}, nil
}

// lookForFreeShards has a standby owner whose look is due count the shards
// nobody holds, or relays whose session lock it finds free (see
// lookAtLocks), and renew at once when there are some: a renewal is a
// durable transaction of half a dozen statements, too much to run four
// times a second on every standby, while this is one read. The caller
// holds o.claimMu.
func (s *Store) lookForFreeShards(ctx context.Context, owner string, o *ownerLease) {
	now := time.Now()
	o.mu.Lock()
	due := o.standby && !now.Before(o.nextLook)
	if due {
		o.nextLook = now.Add(standbyEvery)
	}
	o.mu.Unlock()
	if !due {
		return
	}
	free, err := s.lease.free(ctx, s.db, now)
	if err != nil {
		return // the renewal, on its schedule, looks too
	}
	dead, graceEnds, err := s.lookAtLocks(ctx, s.db, owner, now)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil && len(dead) > 0 {
		o.nextRenew = now // the renewal takes a dead relay's shards over
	} else if !graceEnds.IsZero() && graceEnds.Before(o.nextLook) {
		o.nextLook = graceEnds // look again once the grace has passed
	}
	if free == 0 {
		o.freeSince = time.Time{}
		return
	}
	if o.freeSince.IsZero() {
		o.freeSince = now
	}
	o.nextRenew = now
}

// renewWhenDue renews the owner's leases in line when the claim needs it
// (see [Store.Claim]), or starts a background renewal when one is due. The
// caller holds o.claimMu.
//
// A renewal's transaction commits durably (a lease lost in a database
// crash would let two relays publish one shard), so in line it would add
// a commit's flush and half a dozen round trips to every claim that falls
// due, about once a second; at 1,000 events/s those claims were most of
// the commit-to-publish p99.
func (s *Store) renewWhenDue(ctx context.Context, owner string, o *ownerLease, inFlight []int64) error {
	o.mu.Lock()
	if !s.renewInLine(o, time.Now()) {
		if !time.Now().Before(o.nextRenew) && o.renewing == nil && !o.released {
			done := make(chan struct{})
			o.renewing = done
			// The transaction carries server-side timeouts of LeaseTTL/2 too.
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaseTTL/2)
			o.cancelRenew = cancel
			go s.renewInBackground(ctx, cancel, owner, o, done)
		}
		o.mu.Unlock()
		return nil
	}
	for o.renewing != nil {
		done := o.renewing
		o.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("sqlstore: lease: waiting for the renewal in progress: %w", ctx.Err())
		}
		o.mu.Lock()
	}
	if !s.renewInLine(o, time.Now()) {
		o.mu.Unlock() // the background renewal did it
		return nil
	}
	busy := o.busyShards(inFlight)
	o.mu.Unlock()
	return retryTransient(ctx, func() error { return s.renew(ctx, owner, o, busy) })
}

// busyShards returns the shards that must not be given back during a claim
// with inFlight in flight: none when nothing is in flight, the last batch's
// when inFlight is that batch, and every shard (nil) when it is not known.
// The caller holds o.mu. Only a renewal in line asks, so claims pay
// nothing for it.
func (o *ownerLease) busyShards(inFlight []int64) *[Shards]bool {
	busy := &[Shards]bool{}
	if len(inFlight) == 0 {
		return busy
	}
	if len(inFlight) != len(o.last) {
		return nil
	}
	for i, m := range o.last {
		if m.ID != inFlight[i] {
			return nil
		}
		busy[ShardOf(m.AggregateType, m.AggregateID)] = true
	}
	return busy
}

// updateFenced runs the dialect's fenced mark, again when the database
// aborted it to break a deadlock (on MySQL and MariaDB its locking read of
// the lease rows can deadlock with a lease renewal): a mark only changes
// rows still pending and still the owner's, so running it twice is
// harmless.
func (s *Store) updateFenced(ctx context.Context, owner, set string, setArgs []any, ids []int64, events *eventRange) error {
	return retryTransient(ctx, func() error {
		return s.onConn(ctx, func(q Querier) error {
			return s.dialect.updateFenced(ctx, q, s.tables, owner, set, slices.Clone(setArgs), ids, events)
		})
	})
}

// retryTransient runs fn up to three times while it fails with a
// [transient] error: the database aborted its transaction to break a
// deadlock, as MySQL and MariaDB do between concurrent lease transactions,
// and between a lease transaction and a mark.
func retryTransient(ctx context.Context, fn func() error) error {
	var err error
	for range 3 {
		if err = fn(); !transient(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// transient reports whether err is a deadlock or serialization failure for
// which the database aborted the transaction: running it again may succeed.
func transient(err error) bool {
	if n, ok := mysqlErrorNumber(err); ok {
		return n == 1213 // ER_LOCK_DEADLOCK
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		return code == "40P01" || code == "40001" // deadlock_detected, serialization_failure
	}
	return false
}

// renewInLine reports whether a claim at now must renew before it reads:
// less than half of LeaseTTL is left (none before the first renewal), a
// background renewal asked to give shards back, or the owner holds no
// shard and a renewal is due. The caller holds o.mu.
func (s *Store) renewInLine(o *ownerLease, now time.Time) bool {
	return !now.Before(o.validUntil.Add(-s.cfg.LeaseTTL/2)) || o.giveBack ||
		len(o.shards) == 0 && !now.Before(o.nextRenew)
}

// renewInBackground renews the owner's leases beside its claims, then
// closes done. A failure is retried at a claim a little later, and
// reported by the claim that renews in line once the lease runs short.
func (s *Store) renewInBackground(ctx context.Context, cancel context.CancelFunc, owner string, o *ownerLease, done chan struct{}) {
	defer close(done)
	defer cancel()
	err := s.renew(ctx, owner, o, nil)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.renewing, o.cancelRenew = nil, nil
	if err != nil {
		o.nextRenew = time.Now().Add(min(s.cfg.LeaseTTL/20, 250*time.Millisecond))
	}
}

// claimAgainIn is the hint of an empty batch: while the owner takes its
// share over from other relays, which give shards back as soon as they see
// it alive, its next renewal may bring it messages.
func (s *Store) claimAgainIn(o *ownerLease) time.Duration {
	next := o.nextRenew
	switch {
	case o.standby:
		next = o.nextLook
		if o.nextRenew.Before(next) {
			next = o.nextRenew
		}
	case !o.short:
		return 0
	}
	return max(time.Until(next), time.Millisecond)
}

// RequestWake implements [relay.WakeRequester]. On PostgreSQL, writers
// ([Writer], and so the GORM plugin) send a NOTIFY with their rows only
// while some relay has asked for one: the sequence <table>_wake holds the
// time until which a relay waits. RequestWake sets it to at least now plus
// LeaseTTL, owner's lease renewals extend it while owner waits, and owner's
// next claim that returns messages (or its release) clears it. (Another
// relay that still waits sets it again at its next renewal, within a
// second, and polls meanwhile.) A relay that polls while messages keep
// coming, as [relay.Relay] does, thus costs writers nothing for its
// wake-ups while the application is busy. Writers read the register at
// most every 100 ms, so a running [Store.Listen] also wakes the relay once
// 250 ms after the request, for rows written by writers that had not read
// it yet. An owner that holds no shard (it stands by, see
// StoreConfig.MaxActiveRelays, or has yet to take its share) only records
// the request, and writers pay nothing for it: the renewal that gives the
// owner shards makes it. On SQLite and MySQL, whose writers notify
// nothing, it does nothing.
func (s *Store) RequestWake(ctx context.Context, owner string) error {
	if s.wake.request == "" {
		return nil
	}
	o := s.owner(owner)
	o.claimMu.Lock()
	defer o.claimMu.Unlock()
	o.mu.Lock()
	holds := len(o.shards) > 0
	if !holds {
		// Nothing to be woken for yet: the renewal that gives the owner
		// shards makes the request (see extendWake).
		o.waiting = true
	}
	o.mu.Unlock()
	if !holds {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, s.wake.request, s.cfg.LeaseTTL.Milliseconds()); err != nil {
		return fmt.Errorf("sqlstore: request wake-up: %w", err)
	}
	o.mu.Lock()
	o.waiting = true
	o.mu.Unlock()
	s.settleWake()
	return nil
}

// renew registers the owner as alive, renews its leases and takes or gives
// back shards to hold its even share, in one short transaction, then
// records the outcome in o. It gives back no shard of busy (every shard
// when busy is nil, as in the background), and leaves o.giveBack set when
// that keeps it above its share. In line, the caller holds o.claimMu; in
// the background, no other renewal of the owner runs.
func (s *Store) renew(ctx context.Context, owner string, o *ownerLease, busy *[Shards]bool) (err error) {
	// The session lock comes first: others take an owner for dead only
	// once they have seen its lock held, or found it registered as holding
	// it (session_lock), and then found the lock free.
	lock, err := s.lockOwner(ctx, owner, o)
	if err != nil {
		return err
	}
	start := time.Now()
	ttl := s.cfg.LeaseTTL
	// One connection for the transaction and the guard's restore after it.
	conn, err := s.conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: connect: %w", err)
	}
	guarded := false // the session carries the guard's timeouts
	defer func() {
		if guarded { // the pool must not hand this session out again
			discard(conn)
			return
		}
		s.release(ctx, conn, err)
	}()
	tx, err := conn.BeginTx(ctx, s.dialect.leaseTx())
	if err != nil {
		return fmt.Errorf("sqlstore: lease: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit
	restore, err := s.dialect.guardLeaseTx(ctx, tx, ttl/2)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: %w", err)
	}
	guarded = restore != nil
	l := s.lease
	o.mu.Lock()
	heldNone, rescued, freeSince, relock := len(o.shards) == 0, o.rescued, o.freeSince, o.relock
	held, leaseEnd := o.shards, o.leaseEnd
	o.mu.Unlock()
	if relock {
		// The owner's session ended and it dropped its shards: it gives
		// its rows back, as a relay that starts, and takes its share
		// again, beside relays that may be taking its rows over.
		if err = l.release(ctx, tx, owner, nil); err != nil {
			return fmt.Errorf("sqlstore: lease: give back the shards of an ended session: %w", err)
		}
		held = nil
	}
	// Relays whose session lock has been free for the grace are dead:
	// their shards are free from now on.
	dead, due, err := s.lookAtLocks(ctx, tx, owner, start)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: look at the relays' session locks: %w", err)
	}
	for _, d := range dead {
		if err = l.release(ctx, tx, d, nil); err != nil {
			return fmt.Errorf("sqlstore: lease: take over relay %q, whose session ended: %w", d, err)
		}
		if err = l.unregister(ctx, tx, d); err != nil {
			return fmt.Errorf("sqlstore: lease: take over relay %q, whose session ended: %w", d, err)
		}
	}
	if err = l.register(ctx, tx, owner, start, ttl, lock != nil); err != nil {
		return fmt.Errorf("sqlstore: lease: register relay: %w", err)
	}
	alive, err := l.alive(ctx, tx, start)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: count relays: %w", err)
	}
	owned, err := l.renew(ctx, tx, owner, start, ttl)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: renew: %w", err)
	}
	// Shards held at the last renewal and not now were taken: the lease
	// had expired, or others found the owner's session lock free.
	var loss *leaseLoss
	if n := len(held) - countHeld(held, owned); n > 0 {
		loss = &leaseLoss{reason: LossTakenOver, shards: n}
		if late := start.Sub(leaseEnd); late >= 0 {
			loss.reason, loss.late = LossExpired, late
		}
	}
	m := s.cfg.MaxActiveRelays // at least 1 (setDefaults)
	active, standby, rescue, free := min(max(alive, 1), m), false, false, 0
	others, err := l.holders(ctx, tx, owner, start)
	if err != nil {
		return fmt.Errorf("sqlstore: lease: count other relays' shards: %w", err)
	}
	if outranked(owner, len(owned), others) >= m {
		// Stand by, unless the relays above leave shards free (they
		// run another MaxActiveRelays, or an earlier version that
		// shares the shards with every relay alive): hold those.
		if rescued || !freeSince.IsZero() && start.Sub(freeSince) >= s.rescueAfter() {
			if free, err = l.free(ctx, tx, start); err != nil {
				return fmt.Errorf("sqlstore: lease: count free shards: %w", err)
			}
		}
		rescue = free > 0 || rescued && len(owned) > 0
		standby = !rescue
	}
	target := (Shards + active - 1) / active
	switch {
	case standby:
		target = 0 // give every shard back, as a surplus
	case rescue:
		target = len(owned) + free
	}
	giveBack, took := false, 0
	var leaving []int16
	switch {
	case len(owned) > target:
		var kept, surplus []int16
		kept, surplus, leaving = givingBack(owned, target, busy)
		giveBack = len(leaving) > 0 // at a later claim, in line
		if len(surplus) > 0 {
			if err := l.release(ctx, tx, owner, surplus); err != nil {
				return fmt.Errorf("sqlstore: lease: give back shards: %w", err)
			}
		}
		owned = kept
	case len(owned) < target:
		got, err := l.acquire(ctx, tx, owner, start, ttl, target-len(owned))
		if err != nil {
			return fmt.Errorf("sqlstore: lease: take shards: %w", err)
		}
		took = len(got)
		owned = append(owned, got...)
		slices.Sort(owned)
	}
	if err := l.forget(ctx, tx, start); err != nil {
		return fmt.Errorf("sqlstore: lease: forget stopped relays: %w", err)
	}
	if s.inRenew != nil {
		s.inRenew()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlstore: lease: commit: %w", err)
	}
	// The leases are renewed whether or not the restore succeeds: a
	// connection it fails on is closed, not pooled (see above).
	guarded = guarded && restore(ctx, conn) != nil
	// The wake-up request is extended outside the lease transaction: a
	// register that is missing or not writable leaves the relay to poll
	// (its RequestWake reports that), and must not undo its leases.
	requested := s.extendWake(ctx, o, len(owned) > 0)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lock != lock {
		// The session lock ended during the renewal: the owner holds
		// nothing (see lockLost); its next renewal starts afresh.
		return errors.New("sqlstore: lease: the session lock ended during the renewal")
	}
	o.relock = false
	if loss != nil {
		o.loss = loss
		o.endBatches()
	}
	o.leaseEnd = start.Add(ttl)
	if !due.IsZero() && due.Before(o.nextLook) {
		o.nextLook = due
	}
	o.shards, o.alive, o.short, o.giveBack = owned, alive, len(owned) < target, giveBack
	o.standby, o.rescued = standby, rescue && len(owned) > 0
	if !standby {
		o.freeSince = time.Time{}
	}
	if requested && heldNone {
		// The owner took shards over while it waits: wake it once more
		// for the rows of writers that read the register before this.
		s.settleWake()
	}
	o.claimable = owned
	if len(leaving) > 0 {
		o.claimable = slices.DeleteFunc(slices.Clone(owned), func(sh int16) bool { return slices.Contains(leaving, sh) })
	}
	// The database's expiry is its now() plus ttl, and its now() came after
	// start: start plus ttl, less a margin for clock rate, is on the safe
	// side.
	o.validUntil = start.Add(ttl - ttl/10)
	// Renewing also rebalances (an active relay that joined or left changes
	// every share), so do it at least every second.
	every := min(ttl/5, time.Second)
	if len(owned) < target {
		// Still taking its share: the relays that hold it give shards
		// back within a batch or two of seeing this one alive, so look
		// again soon, and less often once none came for a while.
		switch {
		case took > 0 || o.takeEvery == 0:
			o.takeEvery, o.takeTries = minTakeEvery, 0
		case o.takeTries < minTakeTries:
			o.takeTries++
		default:
			o.takeEvery = min(2*o.takeEvery, maxTakeEvery)
		}
		every = min(every, o.takeEvery)
	} else {
		o.takeEvery, o.takeTries = 0, 0
	}
	if standby {
		o.nextLook = start.Add(standbyEvery)
	}
	o.nextRenew = start.Add(every)
	if !due.IsZero() && due.Before(o.nextRenew) {
		// A relay's session lock was free: renew once the grace has
		// passed, to take it over if it still is.
		o.nextRenew = due
	}
	return nil
}

// countHeld counts the shards of held (sorted) that are in owned (sorted).
func countHeld(held, owned []int16) int {
	n := 0
	for _, sh := range held {
		if _, ok := slices.BinarySearch(owned, sh); ok {
			n++
		}
	}
	return n
}

// minTakeEvery, minTakeTries and maxTakeEvery set how soon an owner short
// of its share renews again (see ownerLease.takeEvery). A relay gives
// shards back within a batch or two (tens of milliseconds) of seeing
// another alive, so one that starts beside a busy one looks every 5 ms
// for the first 100 ms and takes its share within about that; then the
// renewals back off (the holder died, say, and its leases must expire
// first).
const (
	minTakeEvery = 5 * time.Millisecond
	minTakeTries = 20
	maxTakeEvery = 250 * time.Millisecond
)

// rescueAfter is how long shards must stay free before a relay that the
// active ones outrank takes them (see ownerLease.freeSince): longer than
// an active relay short of its share takes to take them (it looks every
// 5 to 250 ms).
func (s *Store) rescueAfter() time.Duration { return max(time.Second, s.cfg.LeaseTTL/5) }

// standbyEvery is how often a relay that stands by (see
// StoreConfig.MaxActiveRelays) looks for shards nobody holds, and so how
// soon it takes over the shards an active relay released.
const standbyEvery = 250 * time.Millisecond

// outranked counts the relays of others (owner to shards held) that stay
// active before owner, which holds mine: those holding more, and, of
// those holding as many, those whose name sorts first.
func outranked(owner string, mine int, others map[string]int) int {
	n := 0
	for o, held := range others {
		if held > mine || held == mine && o < owner {
			n++
		}
	}
	return n
}

// givingBack splits owned (sorted), of which the owner should hold target,
// into the shards it keeps for now and those it gives back now: the
// highest first, none of busy (nil: all are busy). Of the kept shards, the
// highest it still holds beyond target are leaving: claims leave them out
// until a claim with none of them in flight gives them back. kept stays
// sorted.
func givingBack(owned []int16, target int, busy *[Shards]bool) (kept, surplus, leaving []int16) {
	n := len(owned) - target
	kept = slices.Clone(owned)
	if busy != nil {
		for i := len(kept) - 1; i >= 0 && len(surplus) < n; i-- {
			if !busy[kept[i]] {
				surplus = append(surplus, kept[i])
				kept = slices.Delete(kept, i, i+1)
			}
		}
		slices.Reverse(surplus)
	}
	if extra := len(kept) - target; extra > 0 {
		leaving = kept[len(kept)-extra:]
	}
	return kept, surplus, leaving
}

// extendWake extends the owner's wake-up request with its lease while the
// owner waits. It holds o.mu while it does, since the register is not
// transactional: a claim that finds messages clears o.waiting before it
// clears the register, so a renewal beside it cannot set the register
// again after the claim cleared it.
//
// It reports whether it extended the request. A failure (the register is
// missing, or not writable) only lets the request lapse: writers stop
// notifying, and the relay polls; its next RequestWake reports the error.
func (s *Store) extendWake(ctx context.Context, o *ownerLease, holds bool) bool {
	if s.wake.request == "" || !holds {
		return false // an owner without a shard has nothing to be woken for
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.waiting {
		return false
	}
	_, err := s.db.ExecContext(ctx, s.wake.request, s.cfg.LeaseTTL.Milliseconds())
	return err == nil
}

// scanShards reads a column of shard numbers, sorted.
func scanShards(rows *sql.Rows, err error) ([]int16, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int16
	for rows.Next() {
		var sh int16
		if err := rows.Scan(&sh); err != nil {
			return nil, err
		}
		out = append(out, sh)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// scanHolders reads rows of an owner and how many shards it holds.
func scanHolders(rows *sql.Rows, err error) (map[string]int, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var owner string
		var n int
		if err := rows.Scan(&owner, &n); err != nil {
			return nil, err
		}
		out[owner] = n
	}
	return out, rows.Err()
}

// shardList is a comma-separated list of shards, safe to splice into SQL.
func shardList(shards []int16) string {
	parts := make([]string, len(shards))
	for i, sh := range shards {
		parts[i] = strconv.Itoa(int(sh))
	}
	return strings.Join(parts, ", ")
}

// Release implements [relay.Releaser]: it gives back owner's shards and
// unregisters it, so other relays take its share over at their next renewal
// (a standby: at its next look, within 250ms).
func (s *Store) Release(ctx context.Context, owner string) error {
	s.mu.Lock()
	o := s.owners[owner]
	delete(s.owners, owner)
	s.mu.Unlock()
	waiting := false
	if o != nil {
		o.claimMu.Lock()
		defer o.claimMu.Unlock()
		o.mu.Lock()
		o.released = true
		done := o.renewing
		lock := o.lock
		o.lock = nil
		o.mu.Unlock()
		// The session lock ends after the leases: others that see it
		// free find nothing left to take over.
		defer s.unlock(owner, o, lock)
		if done != nil {
			select {
			case <-done:
			case <-ctx.Done():
				return fmt.Errorf("sqlstore: release leases: waiting for the renewal in progress: %w", ctx.Err())
			}
		}
		o.mu.Lock()
		o.shards, o.claimable, o.validUntil, o.last = nil, nil, time.Time{}, nil
		waiting = o.waiting
		o.endBatches()
		o.mu.Unlock()
	}
	// The request ends before the leases do: a standby that takes them
	// over and waits makes its own, which this must not cancel. A failure
	// (the register is missing, or not writable) does not keep the
	// leases: the request lapses by itself within LeaseTTL.
	if cancel := s.wake.cancel; cancel != "" && waiting {
		_, _ = s.db.ExecContext(ctx, cancel)
	}
	if err := s.lease.release(ctx, s.db, owner, nil); err != nil {
		return fmt.Errorf("sqlstore: release leases: %w", err)
	}
	if err := s.lease.unregister(ctx, s.db, owner); err != nil {
		return fmt.Errorf("sqlstore: release leases: %w", err)
	}
	return nil
}

// HandOver implements [relay.HandOverer]: when another relay is alive (it
// renewed its registration within LeaseTTL), it gives owner's shards back
// and unregisters it, as [Store.Release] does, and reports true; the other
// relays take the shards over at their next renewal (a standby: within
// 250ms). With no other relay alive it changes nothing and reports false.
// A later claim by owner registers it again, as a relay that joins: beside
// an active relay, it then stands by (see StoreConfig.MaxActiveRelays).
func (s *Store) HandOver(ctx context.Context, owner string) (bool, error) {
	n, err := s.lease.othersAlive(ctx, s.db, owner, time.Now())
	if err != nil {
		return false, fmt.Errorf("sqlstore: hand over: count the relays alive: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	if err := s.Release(ctx, owner); err != nil {
		return false, err
	}
	return true, nil
}

// OthersAlive implements [relay.PeerCounter]: it returns how many relays
// other than owner renewed their registration within LeaseTTL, the relays
// [Store.HandOver] would hand owner's shards to.
func (s *Store) OthersAlive(ctx context.Context, owner string) (int, error) {
	n, err := s.lease.othersAlive(ctx, s.db, owner, time.Now())
	if err != nil {
		return 0, fmt.Errorf("sqlstore: count the relays alive: %w", err)
	}
	return n, nil
}

// selectClaimable reads the claimable rows of shards (see [Store]). The
// batch's slice is sized for about as many rows as the last claim found
// (sizeHint), not for limit: a relay that claims a few rows at a time, as
// it does at low rates, polling every few milliseconds, would otherwise
// allocate a limit-sized slice (about 250 KB at 1,000) per claim, and that
// garbage's collections, in the application's process, were the largest
// part of the commit-to-publish tail at 1,000 events/s.
//
// The byte cap is kept without adding payload sizes up row by row where
// the dialect can (a running sum cost PostgreSQL about a third of each
// 1,000-row claim): a "small" payload is one of at most maxBytes/limit
// bytes, and any limit small payloads together stay within maxBytes, so
// a claim that meets only small payloads is the batch. The database
// sends a large payload as NULL (so that no more than maxBytes of
// payload cross the wire); a claim that meets one is read again with the
// running sum, and claims keep the sum until one meets no large row.
func (s *Store) selectClaimable(ctx context.Context, shards []int16, inFlight []int64, limit int, maxBytes int64, sizeHint int) (msgs []runtime.OutboxMessage, alive int, err error) {
	if maxBytes <= 0 {
		maxBytes = 1 << 62
	}
	filter := ""
	if len(shards) < Shards {
		filter = " AND o.shard IN (" + shardList(shards) + ")"
	}
	var exclArgs []any
	if len(inFlight) > 0 {
		var excl string
		excl, exclArgs = s.dialect.excludeIDs(inFlight, claimArgs+1)
		filter += excl
	}
	small := maxBytes / int64(limit)
	sc, canCut := s.dialect.(smallClaimer)
	if canCut && !s.largeRows.Load() {
		q, args := sc.claimSmallQuery(s.tables, filter, limit, small)
		msgs, alive, large, err := s.readClaim(ctx, q, append(args, exclArgs...), limit, small, sizeHint)
		if err != nil {
			return nil, 0, err
		}
		if large == 0 {
			return msgs, alive, nil
		}
		s.largeRows.Store(true)
	}
	q, args := s.dialect.claimQuery(s.tables, filter, limit, maxBytes)
	msgs, alive, large, err := s.readClaim(ctx, q, append(args, exclArgs...), limit, small, sizeHint)
	if err == nil && canCut && large == 0 {
		s.largeRows.Store(false)
	}
	return msgs, alive, err
}

// claimArgs is how many arguments the claim queries take before the
// filter's: PostgreSQL's take two; the other dialects splice their
// numbers and ids, and number nothing after their own.
const claimArgs = 2

// readClaim runs a claim query and decodes its rows; large counts the
// payloads larger than small. A NULL payload is a large one that
// claimSmallQuery left out (the column is NOT NULL): readClaim stops at
// the first, with large 1 and the rows before it.
func (s *Store) readClaim(ctx context.Context, q string, args []any, limit int, small int64, sizeHint int) (msgs []runtime.OutboxMessage, alive int, large int, err error) {
	err = s.onConn(ctx, func(c Querier) error {
		msgs, alive, large, err = s.scanClaim(ctx, c, q, args, limit, small, sizeHint)
		return err
	})
	return msgs, alive, large, err
}

// scanClaim is readClaim on c.
func (s *Store) scanClaim(ctx context.Context, c Querier, q string, args []any, limit int, small int64, sizeHint int) (msgs []runtime.OutboxMessage, alive int, large int, err error) {
	rows, err := c.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("sqlstore: claim: select pending: %w", err)
	}
	defer rows.Close()
	// Scan sets every field of these for each row, to values of the row's
	// own: declared once, since the pointers Scan takes would move a copy
	// per row to the heap (2,000 allocations, 220 KB, per 1,000 rows).
	var (
		r       RowValues
		payload sql.Null[[]byte]
		headers sql.NullString
	)
	for rows.Next() {
		if msgs == nil {
			msgs = make([]runtime.OutboxMessage, 0, min(limit, max(sizeHint, 16)))
		}
		if err := rows.Scan(&r.ID, &r.EventID, &r.EventType, &r.EventVersion, &r.AggregateType, &r.AggregateID,
			&r.Topic, &payload, &headers, &r.OccurredAt, &r.CreatedAt, &r.Attempts, &alive); err != nil {
			return nil, 0, 0, fmt.Errorf("sqlstore: claim: scan: %w", err)
		}
		if !payload.Valid {
			return msgs, alive, 1, nil
		}
		r.Payload = payload.V
		if int64(len(r.Payload)) > small {
			large++
		}
		r.Headers = headers.String
		m, err := DecodeRow(r)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("sqlstore: claim: %w", err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("sqlstore: claim: select pending: %w", err)
	}
	return msgs, alive, large, nil
}

// failureKind is how a failed message is recorded.
type failureKind int

const (
	failOutage  failureKind = iota // nothing was published, or the failure is transient: delay, no attempt
	failAttempt                    // others were published: count, delay, maybe park
	failPark                       // permanent: park now
)

// Mark implements [relay.Store]. Every statement is fenced by the owner's
// leases: rows of a shard the owner no longer holds are left alone. On
// PostgreSQL the marks commit without waiting for the WAL flush
// (synchronous_commit off): a mark lost in a database crash only publishes
// the message again.
func (s *Store) Mark(ctx context.Context, b relay.Batch, o relay.Outcome) error {
	tok, ok := b.Token.(claimToken)
	if !ok {
		return fmt.Errorf("sqlstore: mark: the batch's token is %T, not this store's", b.Token)
	}
	byID := make(map[int64]*runtime.OutboxMessage, len(b.Messages))
	for i := range b.Messages {
		byID[b.Messages[i].ID] = &b.Messages[i]
	}
	ranged, err := s.rangedMarks(ctx)
	if err != nil {
		return err
	}
	if err := s.markPublished(ctx, tok.owner, o.Published, s.eventRange(ranged, byID, o.Published)); err != nil {
		return err
	}
	if len(o.Failed) == 0 {
		return nil
	}
	// Record the failure on each aggregate's first failed message; the
	// others wait behind it.
	type group struct {
		kind failureKind
		text string
	}
	groups := map[group][]int64{}
	var order []group
	seen := map[aggKey]bool{}
	for _, f := range o.Failed {
		m := byID[f.ID]
		if m == nil {
			return fmt.Errorf("sqlstore: mark: failed id %d is not in the batch", f.ID)
		}
		a := aggKey{m.AggregateType, m.AggregateID}
		if seen[a] {
			continue
		}
		seen[a] = true
		g := group{kind: failOutage, text: failureText(f.Err)}
		switch {
		case f.Permanent:
			g.kind = failPark
		case f.Transient:
			// The broker's failure, not the message's (see
			// runtime.TransientError): as in an outage, no attempt.
		case len(o.Published) > 0:
			g.kind = failAttempt
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], f.ID)
	}
	for _, g := range order {
		set, args := s.dialect.failureSet(g.kind, g.text, s.cfg)
		if err := s.updateFenced(ctx, tok.owner, set, args, groups[g], s.eventRange(ranged, byID, groups[g])); err != nil {
			return fmt.Errorf("sqlstore: mark: record failed attempt: %w", err)
		}
	}
	return nil
}

type aggKey struct{ typ, id string }

// rangedMarks reports whether marks bound the event ids too: on a
// partitioned PostgreSQL table (asked once per store), where it prunes the
// partitions the update reads.
func (s *Store) rangedMarks(ctx context.Context) (bool, error) {
	switch s.partitioned.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	if s.dialect.name() != Postgres {
		s.partitioned.Store(1)
		return false, nil
	}
	p, err := isPartitioned(ctx, s.db, s.table)
	if err != nil {
		return false, fmt.Errorf("sqlstore: mark: is %s partitioned: %w", s.table, err)
	}
	if p {
		s.partitioned.Store(2)
	} else {
		s.partitioned.Store(1)
	}
	return p, nil
}

// eventRange returns the range of the event ids of ids' messages when
// ranged is set, or nil.
func (s *Store) eventRange(ranged bool, byID map[int64]*runtime.OutboxMessage, ids []int64) *eventRange {
	if !ranged || len(ids) == 0 {
		return nil
	}
	var r *eventRange
	for _, id := range ids {
		m := byID[id]
		if m == nil {
			return nil // not from the batch: no bound
		}
		e := m.EventID.String() // lower-case hex: compares as PostgreSQL compares uuids
		switch {
		case r == nil:
			r = &eventRange{e, e}
		case e < r.lo:
			r.lo = e
		case e > r.hi:
			r.hi = e
		}
	}
	return r
}

// markPublished marks ids as published, fenced by owner's leases.
func (s *Store) markPublished(ctx context.Context, owner string, ids []int64, events *eventRange) error {
	if len(ids) == 0 {
		return nil
	}
	set, args := s.dialect.publishedSet()
	if s.cfg.DeletePublished {
		set, args = "", nil // a DELETE (see dialect.updateFenced)
	}
	if err := s.updateFenced(ctx, owner, set, args, ids, events); err != nil {
		return fmt.Errorf("sqlstore: mark published: %w", err)
	}
	return nil
}

// failureText is the last_error recorded on a message that was not published.
func failureText(err error) string {
	if err == nil {
		return "not published"
	}
	return err.Error()
}

// Unpark puts parked messages back in the queue with their attempts reset,
// for an operator who fixed what made them fail, and returns how many it
// unparked. A parked message held its aggregate's later messages back, so
// it is published before them.
func (s *Store) Unpark(ctx context.Context, ids ...int64) (int64, error) {
	n, err := s.execIDs(ctx, `UPDATE `+s.table+` SET parked_at = NULL, attempts = 0, next_attempt_at = NULL
		WHERE parked_at IS NOT NULL AND published_at IS NULL AND id IN (%s)`, ids)
	if err != nil {
		return n, fmt.Errorf("sqlstore: unpark: %w", err)
	}
	return n, nil
}

// Discard deletes parked messages that will never be published (an event
// too large for the broker, say), so their aggregates' later messages go
// out, and returns how many it deleted. Consumers never see the discarded
// events.
func (s *Store) Discard(ctx context.Context, ids ...int64) (int64, error) {
	n, err := s.execIDs(ctx, `DELETE FROM `+s.table+` WHERE parked_at IS NOT NULL AND published_at IS NULL AND id IN (%s)`, ids)
	if err != nil {
		return n, fmt.Errorf("sqlstore: discard: %w", err)
	}
	return n, nil
}

// execIDs runs query, whose %s takes a list of placeholders, for ids in
// chunks, and returns the rows affected.
func (s *Store) execIDs(ctx context.Context, query string, ids []int64) (int64, error) {
	var total int64
	for start := 0; start < len(ids); start += 500 {
		part := ids[start:min(start+500, len(ids))]
		args := make([]any, len(part))
		phs := make([]string, len(part))
		for i, id := range part {
			args[i] = id
			phs[i] = s.dialect.ph(i + 1)
		}
		res, err := s.db.ExecContext(ctx, fmt.Sprintf(query, strings.Join(phs, ", ")), args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// DeletePublished deletes rows published before now minus olderThan, at most
// batch rows per statement (default 1,000 when batch <= 0), each batch in
// its own short transaction that waits for no row lock, and returns how
// many it deleted. [Retention] runs it on a schedule. Keep olderThan longer than any
// in-memory aggregate lives after its save, because the outbox row is what
// deduplicates a second save of the same pending event (see the package
// documentation).
func (s *Store) DeletePublished(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	// The cutoff uses the clock that wrote published_at: the database's,
	// the process's on SQLite.
	var total int64
	for {
		n, err := s.deletePublishedBatch(ctx, olderThan, batch, 0)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// deletePublishedBatch deletes at most batch rows published before now minus
// olderThan (and with ids up to maxID, when positive), in one short
// transaction.
func (s *Store) deletePublishedBatch(ctx context.Context, olderThan time.Duration, batch int, maxID int64) (int64, error) {
	n, err := s.dialect.deletePublished(ctx, s.db, s.table, olderThan, batch, maxID)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: delete published: %w", err)
	}
	return n, nil
}

// createdHorizon returns the largest id whose row was created more than
// olderThan ago, or 0 when there is none, by a binary search over the
// primary key (ids grow with created_at): about 2·log2(ids) point reads,
// however large the table. Every row published more than olderThan ago was
// created before that, so a retention pass reads only the ids up to it, not
// the published rows younger than the age. A transaction that commits long
// after it began gives its rows an early created_at and a late id: those
// rows are deleted once the horizon passes them.
func (s *Store) createdHorizon(ctx context.Context, olderThan time.Duration) (int64, error) {
	// Two queries: SQLite reads min and max from the index only when
	// each is alone in its query.
	var lo, hi sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT min(id) FROM `+s.table).Scan(&lo); err != nil {
		return 0, fmt.Errorf("sqlstore: retention horizon: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, `SELECT max(id) FROM `+s.table).Scan(&hi); err != nil {
		return 0, fmt.Errorf("sqlstore: retention horizon: %w", err)
	}
	if !lo.Valid {
		return 0, nil
	}
	// The placeholders in text order, for the dialects whose are all "?".
	probe := `SELECT id, CASE WHEN ` + s.dialect.secondsSince("created_at") + ` > ` + s.dialect.ph(1) + ` THEN 1 ELSE 0 END
		FROM ` + s.table + ` WHERE id >= ` + s.dialect.ph(2) + ` ORDER BY id LIMIT 1`
	// old reports the id of the first row at or after id, and whether it
	// is older than olderThan.
	old := func(id int64) (int64, bool, error) {
		var (
			first int64
			isOld int
		)
		err := s.db.QueryRowContext(ctx, probe, olderThan.Seconds(), id).Scan(&first, &isOld)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return first, isOld == 1, err
	}
	first, ok, err := old(lo.Int64)
	if err != nil || !ok {
		return 0, wrapHorizon(err)
	}
	low, high := first, hi.Int64 // the row at low is old; none past high exists
	for low < high {
		mid := low + (high-low+1)/2
		id, ok, err := old(mid)
		switch {
		case err != nil:
			return 0, wrapHorizon(err)
		case ok:
			low = id
		default:
			high = mid - 1
		}
	}
	return low, nil
}

func wrapHorizon(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlstore: retention horizon: %w", err)
}

// Stats reads the state of the outbox table, for monitoring: how many
// messages are pending, how long the oldest has been waiting (on the
// database's clock, the process's on SQLite), and how many failed or were
// parked (see [Store.Unpark] and [Store.Discard]). It reads it with one query over the pending and
// parked rows' partial indexes; published rows are not read. On a large
// backlog it counts every pending row: call it at scrape intervals, not per
// message.
func (s *Store) Stats(ctx context.Context) (relay.Stats, error) {
	pending := `FROM ` + s.table + ` WHERE published_at IS NULL AND parked_at IS NULL`
	age := s.dialect.pendingAge(pending)
	q := `SELECT (SELECT count(*) ` + pending + `),
		(SELECT count(*) ` + pending + ` AND attempts > 0),
		(SELECT count(*) FROM ` + s.table + ` WHERE parked_at IS NOT NULL AND published_at IS NULL),
		` + age
	var st relay.Stats
	var seconds float64
	if err := s.db.QueryRowContext(ctx, q).Scan(&st.Pending, &st.Retrying, &st.Parked, &seconds); err != nil {
		return relay.Stats{}, fmt.Errorf("sqlstore: stats: %w", err)
	}
	if seconds > 0 {
		st.OldestPending = time.Duration(seconds * float64(time.Second))
	}
	return st, nil
}
