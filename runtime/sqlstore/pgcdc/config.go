package pgcdc

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Mode says where the events are in the transaction log.
type Mode string

const (
	// Table streams the rows inserted into the outbox table (the GORM
	// plugin's and sqlstore.Writer's, unchanged): the rows stay, for
	// retention, replay, the dashboard and the operator command.
	Table Mode = "table"
	// Messages streams transactional logical decoding messages that the
	// writer emits with pg_logical_emit_message instead of inserting rows
	// (sqlstore.WriterConfig.LogicalMessages): no outbox row exists at
	// all.
	Messages Mode = "messages"
)

// Defaults of [Config].
const (
	DefaultStatusInterval = 10 * time.Second
	DefaultHeartbeat      = time.Minute
	DefaultMaxBuffered    = 10000
	DefaultRetryDelay     = time.Second
	DefaultMaxRetryDelay  = time.Minute
	DefaultLease          = 20 * time.Second
	// DefaultStatementTimeout is [Config.StatementTimeout]'s default.
	DefaultStatementTimeout = 10 * time.Second
	// DefaultMessagePrefix is the prefix of the logical decoding messages
	// of [Messages] mode.
	DefaultMessagePrefix = "gooutbox"
)

// ErrInvalidConfig is wrapped by the errors of [Config.Validate].
var ErrInvalidConfig = errors.New("pgcdc: invalid config")

// Config configures a [Store]. The zero value of every field but
// ConnString is its default.
type Config struct {
	// ConnString is the PostgreSQL URL or keyword/value DSN. The store
	// opens its replication connection from it (adding
	// replication=database), and a plain connection for Setup and the
	// heartbeat. The role needs the REPLICATION attribute (or to be a
	// superuser), and Setup needs to create a publication on the table.
	// Required.
	ConnString string

	// Table is the outbox table, as for sqlstore.StoreConfig.Table.
	// Default: "outbox_messages" (sqlstore.DefaultTable).
	Table string

	// Mode is where the events are: rows of Table ([Table]) or logical
	// decoding messages ([Messages]).
	// Default: Table.
	Mode Mode

	// Slot is the logical replication slot the store streams from, which
	// keeps the server's WAL from the oldest event not yet confirmed
	// published. Lower-case letters, digits and underscores, at most 63.
	// Default: the table's name (without schema) followed by "_cdc".
	Slot string

	// Publication is the publication of Table (inserts only) the slot's
	// pgoutput plugin reads. A plain identifier.
	// Default: the same name as Slot.
	Publication string

	// MessagePrefix is the prefix of the logical decoding messages that
	// [Messages] mode reads; the writer must use the same one. Messages
	// belong to the database, not to a schema: two outboxes in one
	// database (in two schemas, say) need two prefixes.
	// Default: "gooutbox" ([DefaultMessagePrefix]).
	MessagePrefix string

	// StatusInterval is the longest time between two standby status
	// updates, which tell the server how far the events were published
	// (the slot's confirmed_flush_lsn) and that the relay is alive. The
	// store also sends one soon after a batch is marked published. Keep it
	// well below the server's wal_sender_timeout (60s by default).
	// Default: 10s ([DefaultStatusInterval]).
	StatusInterval time.Duration

	// Heartbeat is how often the store, while it has nothing to publish,
	// writes an empty non-transactional logical decoding message
	// (pg_logical_emit_message(false, ...)), so that the stream moves on
	// and the slot's position advances past the rest of the database's
	// WAL even when the server sends nothing else: without it, an idle
	// outbox in a busy database could keep WAL from being recycled.
	// Negative disables it.
	// Default: 1m ([DefaultHeartbeat]).
	Heartbeat time.Duration

	// MaxBuffered bounds the events decoded from the stream and not yet
	// published, held in memory: past it, the store stops reading the
	// stream (the server buffers, then waits) until the relay catches up.
	// A transaction holding more events than MaxBuffered is read whole.
	// Default: 10000 ([DefaultMaxBuffered]).
	MaxBuffered int

	// RetryDelay and MaxRetryDelay bound the wait before a message that
	// failed to publish is tried again: RetryDelay doubled per attempt,
	// at most MaxRetryDelay. Its aggregate's later messages wait with it.
	// Default: 1s and 1m.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration

	// SenderTimeout sets the server's wal_sender_timeout for this store's
	// stream: how long the server waits on a silent stream before ending
	// it, and so how long a paused or cut-off relay keeps a standby from
	// taking the slot over. StatusInterval and Lease default below it.
	// Default: 0, the server's own (60s unless configured).
	SenderTimeout time.Duration

	// Lease is how long after the server was last heard from on the
	// stream (every status update asks it for a reply) the store hands
	// out events and a batch may be published ([relay.Batch.Deadline]): a
	// relay paused past it (a stopped process) neither claims from its
	// buffer nor goes on publishing when it wakes, after a standby may
	// have taken the slot over and published later events. Keep it below
	// the stream's wal_sender_timeout (SenderTimeout), after which the
	// server ends a silent stream and a standby may take the slot.
	// Default: 20s ([DefaultLease]), or half of SenderTimeout when that
	// is less.
	Lease time.Duration

	// SkipMarking, in [Table] mode, leaves published_at unset on the rows
	// of published events. By default the store sets it, off the relay's
	// path, in one UPDATE per 200ms for the rows published since, so that
	// the table says what the polling relay's would: retention deletes
	// published rows (sqlstore.Retention), the dashboard and the operator
	// command count only unpublished ones as pending, and a polling relay
	// that takes over publishes only what the CDC relay did not. Skipping
	// it saves that UPDATE; the rows then look pending forever, and must be
	// deleted by other means. Messages mode has no rows.
	// Default: false.
	SkipMarking bool

	// DeletePublished, in Table mode, deletes the rows of published
	// events instead of setting their published_at (the same pass of the
	// marker, a DELETE instead of an UPDATE), as
	// sqlstore.StoreConfig.DeletePublished does for the polling relay:
	// cheaper for the database, and the table holds only what is not
	// published yet, so no retention job is needed; replay and the
	// published views of the dashboard find nothing. Not with SkipMarking.
	// Default: false, keep published rows.
	DeletePublished bool

	// StatementTimeout bounds each statement the store runs on its plain
	// connections (marking rows published, parking and holding rows, the
	// heartbeat, reading the parked aggregates when a stream opens), the
	// start of a stream, and each connect unless ConnString sets
	// connect_timeout. A statement on a connection that stopped answering
	// (a half-open connection, say) fails after it, and the next one opens
	// a new connection.
	// Default: 10s ([DefaultStatementTimeout]).
	StatementTimeout time.Duration

	// Logger receives the store's log lines.
	// Default: slog.Default().
	Logger *slog.Logger
}

// slotName is what PostgreSQL accepts as a replication slot name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// identifier is a plain SQL identifier (for the publication).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = sqlstore.DefaultTable
	}
	if c.Mode == "" {
		c.Mode = Table
	}
	if c.Slot == "" {
		base := c.Table
		if i := strings.LastIndexByte(base, '.'); i >= 0 {
			base = base[i+1:]
		}
		c.Slot = strings.ToLower(strings.Trim(base, `"`)) + "_cdc"
	}
	if c.Publication == "" {
		c.Publication = c.Slot
	}
	if c.MessagePrefix == "" {
		c.MessagePrefix = DefaultMessagePrefix
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
		if c.SenderTimeout > 0 {
			c.StatusInterval = min(c.StatusInterval, c.SenderTimeout/3)
		}
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.MaxRetryDelay == 0 {
		c.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
		if c.SenderTimeout > 0 {
			c.Lease = min(c.Lease, c.SenderTimeout/2)
		}
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether c, with its defaults applied, is usable. Its
// errors wrap [ErrInvalidConfig] and name the field.
func (c Config) Validate() error {
	c.setDefaults()
	if err := sqlstore.CheckTable(c.Table, sqlstore.MaxOutboxTableName); err != nil {
		return fmt.Errorf("%w: Table: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.ConnString == "":
		return fmt.Errorf("%w: ConnString is required", ErrInvalidConfig)
	case c.Mode != Table && c.Mode != Messages:
		return fmt.Errorf("%w: Mode %q: want %q or %q", ErrInvalidConfig, c.Mode, Table, Messages)
	case !slotName.MatchString(c.Slot):
		return fmt.Errorf("%w: Slot %q: a replication slot name is 1 to 63 lower-case letters, digits and underscores", ErrInvalidConfig, c.Slot)
	case !identifier.MatchString(c.Publication):
		return fmt.Errorf("%w: Publication %q is not a plain SQL identifier", ErrInvalidConfig, c.Publication)
	case c.StatusInterval < 0, c.MaxBuffered < 0, c.RetryDelay < 0, c.MaxRetryDelay < 0, c.Lease < 0, c.SenderTimeout < 0, c.StatementTimeout < 0:
		return fmt.Errorf("%w: StatusInterval, MaxBuffered, RetryDelay, MaxRetryDelay, Lease, SenderTimeout and StatementTimeout must not be negative", ErrInvalidConfig)
	case c.DeletePublished && c.SkipMarking:
		return fmt.Errorf("%w: DeletePublished and SkipMarking: a published row is either deleted or left as it is, not both", ErrInvalidConfig)
	case c.SenderTimeout > 0 && (c.Lease >= c.SenderTimeout || c.StatusInterval >= c.SenderTimeout):
		return fmt.Errorf("%w: Lease (%v) and StatusInterval (%v) must be below SenderTimeout (%v): a batch must end before a standby may take the slot, and a status must keep the stream alive", ErrInvalidConfig, c.Lease, c.StatusInterval, c.SenderTimeout)
	}
	return nil
}

// WithDefaults returns c with the default of every field left zero, as
// [Open] uses it: the slot's and the publication's names, say.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}
