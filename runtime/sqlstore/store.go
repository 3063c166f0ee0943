package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gooutbox/outbox/runtime/relay"
)

// StoreConfig configures a [Store]. The zero value is a valid configuration.
type StoreConfig struct {
	// Dialect is the database's dialect. Default: [DialectOf] the
	// DB, which knows the usual drivers; set it for another driver
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
	// instead of keeping it until retention deletes it. On MySQL, MariaDB,
	// SQLite and a partitioned PostgreSQL table the mark is then a DELETE,
	// cheaper than the UPDATE of published_at; on a plain PostgreSQL table,
	// whose mark is already a DELETE of the queue's entries (see "The
	// queue" in the package documentation), it deletes the rows too and
	// drains no faster (0.91–0.94× in relaybench). Either way the table
	// holds only pending, retrying and parked rows, so no retention is
	// needed for the outbox. What it
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
	db      DB
	dialect dialect
	table   string
	tables  storeTables
	lease   leaseOps
	cfg     StoreConfig
	// wake holds the dialect's wake-up statements (see dialect.wakeSQL),
	// built once.
	wake struct{ request, cancel string }
	// lockConns counts the connections holding a session lock.
	lockConns atomic.Int32
	// listening is the notify function of a running Listen, or nil.
	listening atomic.Pointer[func()]

	mu     sync.Mutex
	owners map[string]*ownerLease

	// layout is 0 until the store has asked the database how the table
	// is laid out (PostgreSQL: see layoutOf), then a layout.
	layout atomic.Int32
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
func NewStore(db DB, cfg StoreConfig) (*Store, error) {
	if nilDB(db) {
		return nil, fmt.Errorf("sqlstore: store: %w", errNilDB)
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dialect == "" {
		var err error
		if cfg.Dialect, err = db.Dialect(); err != nil {
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

const (
	failOutage  failureKind = iota // nothing was published, or the failure is transient: delay, no attempt
	failAttempt                    // others were published: count, delay, maybe park
	failPark                       // permanent: park now
)

// The relay's optional capabilities (see relay.Store) that a Store has.
var (
	_ relay.InFlightExcluder = (*Store)(nil)
	_ relay.Releaser         = (*Store)(nil)
	_ relay.HandOverer       = (*Store)(nil)
	_ relay.PeerCounter      = (*Store)(nil)
	_ relay.ShardHolder      = (*Store)(nil)
	_ relay.Notifier         = (*Store)(nil)
	_ relay.NotifyChecker    = (*Store)(nil)
	_ relay.WakeRequester    = (*Store)(nil)
)
