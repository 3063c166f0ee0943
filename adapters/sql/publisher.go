package sql

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/adapters/internal/publishing"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// PublisherConfig configures [NewPublisher]. Its zero value is ready to use.
type PublisherConfig struct {
	// SkipSchemaInitialization stops the publisher from creating a topic's
	// tables (messages, group offsets and offset counter: CREATE TABLE IF NOT
	// EXISTS, under an advisory lock) the first time it publishes to the
	// topic. Set it when
	// the tables are created by migrations ([CreateStatements]) and the
	// database user may not create tables. The tables' layout is checked
	// either way ([ErrLegacySchema]).
	//
	// Default: false, the tables are created on first use.
	SkipSchemaInitialization bool

	// Logger is kept for symmetry with [SubscriberConfig]; the publisher
	// logs nothing (every failure is returned).
	// Default: nil.
	Logger *slog.Logger
}

// setDefaults fills in the zero-value defaults (there are none to fill).
func (c *PublisherConfig) setDefaults() {}

// Validate reports a missing or out-of-range setting, wrapping
// [ErrInvalidConfig]. Every PublisherConfig is valid today.
func (c PublisherConfig) Validate() error { return nil }

// Publisher writes messages to PostgreSQL tables, one per topic (see the
// package documentation). It is safe for concurrent use. Close it when done;
// it does not close the *sql.DB.
type Publisher struct {
	db     *sql.DB
	create bool

	// ready holds the topics whose tables were checked (and created).
	ready sync.Map

	// mu is held for reading by every Publish and for writing by Close, so
	// Close waits for the calls in flight.
	mu     sync.RWMutex
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher writing through db, which must be a
// PostgreSQL database (the pgx driver, github.com/jackc/pgx/v5/stdlib, is
// the tested one): another database's driver is refused with an error
// wrapping [ErrNotPostgres]. It logs to cfg.Logger.
func NewPublisher(db *sql.DB, cfg PublisherConfig) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkDriver(db); err != nil {
		return nil, err
	}
	return &Publisher{db: db, create: !cfg.SkipSchemaInitialization}, nil
}

// Publish inserts msgs into topic's table with one INSERT statement, so all
// of them are committed, in the order given, or none, and returns once they
// are committed. Their offsets follow the topic's last one, given in commit
// order (see the package documentation). The statement runs with the first
// message's context. More
// than [MaxMessagesPerInsert] messages take several statements, in order; if
// one fails, the error is a [runtime.PublishErrors] saying which messages
// were committed.
//
// An invalid topic ([ErrInvalidTopic]) and data PostgreSQL refuses are
// permanent errors ([runtime.Permanent]); every other error may succeed when
// retried. After [Publisher.Close] it returns [ErrPublisherClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) (err error) {
	defer func() { err = publishing.Classify(err, transient) }()
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if err := validateTopic(topic); err != nil {
		return runtime.Permanent(err)
	}
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) <= MaxMessagesPerInsert {
		return p.insert(topic, msgs)
	}
	for start := 0; start < len(msgs); start += MaxMessagesPerInsert {
		end := min(start+MaxMessagesPerInsert, len(msgs))
		if err := p.insert(topic, msgs[start:end]); err != nil {
			errs := make(runtime.PublishErrors, len(msgs))
			for i := start; i < len(msgs); i++ {
				errs[i] = err
			}
			return errs
		}
	}
	return nil
}

// insert inserts msgs with one statement, after checking (and creating)
// the topic's tables the first time.
func (p *Publisher) insert(topic string, msgs []*message.Message) error {
	ctx := msgs[0].Context()
	t := tablesOf(topic)
	if _, ok := p.ready.Load(topic); !ok {
		if err := initialize(ctx, p.db, t, p.create); err != nil {
			if errors.Is(err, ErrLegacySchema) {
				// Not the message's fault: retried, without counting an
				// attempt, until the operator upgrades the tables.
				return runtime.Transient(err)
			}
			return err
		}
		p.ready.Store(topic, struct{}{})
	}
	query, args, err := t.insertQuery(msgs)
	if err != nil {
		return runtime.Permanent(err)
	}
	res, err := p.db.ExecContext(ctx, query, args...)
	if err != nil {
		return classify(fmt.Errorf("sql: publish to %s: %w", topic, err))
	}
	if n, err := res.RowsAffected(); err == nil && n != int64(len(msgs)) {
		// Only a counter row deleted by hand leaves the UPDATE nothing to
		// return; the next call recreates it (unless the tables are the
		// migrations').
		p.ready.Delete(topic)
		return fmt.Errorf("sql: publish to %s: inserted %d of %d messages: the row of %s is missing", topic, n, len(msgs), t.counter)
	}
	return nil
}

// Close waits for the Publish calls in flight and makes later calls fail
// with [ErrPublisherClosed]. It does not close the *sql.DB. It is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return nil
}

// transient reports whether a publish error is the database's or the
// connection's rather than the message's: a bad or closed connection
// (driver.ErrBadConn, sql.ErrConnDone), a network error, or an SQLSTATE of
// a connection exception (class 08), an operator intervention (57P01 to
// 57P03: shutdown, crash, cannot connect now), a serialization failure or
// deadlock (40001, 40P01) or insufficient resources (class 53), for
// drivers whose errors report one (pgx's pgconn.PgError, lib/pq).
func transient(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || publishing.ConnectionLost(err) {
		return true
	}
	var st interface{ SQLState() string }
	if !errors.As(err, &st) {
		return false
	}
	code := st.SQLState()
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "40001", "40P01":
		return true
	}
	return false
}

// checkDriver refuses a nil db and one whose driver is another
// database's. A driver it cannot tell (a wrapper that instruments one) is
// taken for PostgreSQL's.
func checkDriver(db *sql.DB) error {
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	if d, err := sqlstore.DialectOf(db); err == nil && d != sqlstore.Postgres {
		return fmt.Errorf("%w: the *sql.DB's driver (%T) is %s's; this package's tables and statements are PostgreSQL's", ErrNotPostgres, db.Driver(), d)
	}
	return nil
}
