package hooks

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
)

// StoreConfig configures a [Store]. The zero value is a valid configuration.
type StoreConfig struct {
	// Table is the outbox table; it must match the plugin's. Default:
	// [DefaultTable].
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
	// as above. A message whose failure the publisher marks permanent
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
	// shards between the relays alive, every LeaseTTL/5 but at least every
	// second while they run, so a relay that stops (killed, paused, cut off
	// from the database) has its share taken over by the others within
	// LeaseTTL plus a renewal interval and a poll; a relay that stops
	// cleanly hands it over at once. A relay never publishes past its
	// lease. Default: 15s.
	LeaseTTL time.Duration
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
}

// Validate reports whether the configuration is usable.
func (c StoreConfig) Validate() error {
	switch {
	case c.RetryDelay < 0 || c.MaxRetryDelay < 0 || c.MaxAttempts < 0 || c.LeaseTTL < 0:
		return fmt.Errorf("hooks: store config: RetryDelay, MaxRetryDelay, MaxAttempts and LeaseTTL must not be negative")
	case c.LeaseTTL > 0 && c.LeaseTTL < 100*time.Millisecond:
		return fmt.Errorf("hooks: store config: LeaseTTL %v is shorter than 100ms", c.LeaseTTL)
	case c.Table != "":
		return validTable(c.Table)
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
// relays divide the shards between them through leases in a small table
// (<table>_leases), each taking an even share of the relays alive
// (<table>_relays). A relay reads and publishes only the pending rows of its
// own shards, so one aggregate is published by one relay at a time, in
// order, with no row locks and no transaction open while it publishes:
// claiming is one SELECT, marking one UPDATE, and the lease bookkeeping a
// short transaction every LeaseTTL/5. Marks are fenced: a relay that lost a
// shard (it was paused past its lease, say) cannot mark that shard's rows.
// Relays that start or stop rebalance the shards within a few seconds. The
// same holds on SQLite, whose transactions are serialised, also across
// processes.
//
// # What a claim returns
//
// The pending rows of the relay's shards in id order (for each aggregate, in
// commit order: see [Plugin]), up to the row and byte limits, leaving out
// every aggregate that has a message waiting for its retry or parked, so a
// failing aggregate holds back only itself.
//
// A Store is safe for concurrent use.
type Store struct {
	db      *sql.DB
	dialect dialect
	table   string
	leases  string
	relays  string
	cfg     StoreConfig

	mu     sync.Mutex
	owners map[string]*ownerLease
}

// ownerLease is what a Store knows of one relay's leases.
type ownerLease struct {
	mu         sync.Mutex // one claim at a time per owner
	shards     []int16    // sorted
	validUntil time.Time  // local clock, conservative
	nextRenew  time.Time
}

// claimToken is the Token of the batches a Store returns.
type claimToken struct{ owner string }

var (
	_ relay.Store    = (*Store)(nil)
	_ relay.Releaser = (*Store)(nil)
	_ relay.Notifier = (*Store)(nil)
)

// NewStore returns a store on db's connection pool. It returns an error
// wrapping [ErrInvalidTable] or [ErrUnsupportedDialect] for a bad table name
// or dialect.
func NewStore(db *gorm.DB, cfg StoreConfig) (*Store, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("hooks: store: %w", err)
	}
	return NewSQLStore(sqlDB, db.Dialector.Name(), cfg)
}

// NewSQLStore returns a store on a database/sql pool, for relays that do not
// use GORM. driver is "postgres" (pgx's stdlib driver, "pgx") or "sqlite".
func NewSQLStore(db *sql.DB, driver string, cfg StoreConfig) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if driver == "pgx" {
		driver = "postgres"
	}
	d, err := dialectOf(driver)
	if err != nil {
		return nil, err
	}
	return &Store{
		db: db, dialect: d, table: cfg.Table, cfg: cfg,
		leases: leasesTable(cfg.Table), relays: relaysTable(cfg.Table),
		owners: map[string]*ownerLease{},
	}, nil
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
		o = &ownerLease{}
		s.owners[name] = o
	}
	return o
}

const selectColumns = "id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, created_at, attempts"

// Claim implements [relay.Store]: it renews, takes or gives back shards when
// due, then returns the claimable rows of the owner's shards. The batch's
// Deadline is the end of the owner's lease.
func (s *Store) Claim(ctx context.Context, req relay.ClaimRequest) (relay.Batch, error) {
	if req.Limit <= 0 {
		return relay.Batch{}, fmt.Errorf("hooks: claim: limit %d must be positive", req.Limit)
	}
	if req.Owner == "" {
		return relay.Batch{}, errors.New("hooks: claim: empty owner")
	}
	o := s.owner(req.Owner)
	o.mu.Lock()
	defer o.mu.Unlock()
	if now := time.Now(); !now.Before(o.nextRenew) || !now.Before(o.validUntil) {
		if err := s.renew(ctx, req.Owner, o); err != nil {
			return relay.Batch{}, err
		}
	}
	if len(o.shards) == 0 {
		return relay.Batch{}, nil
	}
	msgs, err := s.selectClaimable(ctx, o.shards, req.Limit, req.MaxBytes)
	if err != nil {
		return relay.Batch{}, err
	}
	if len(msgs) == 0 {
		return relay.Batch{}, nil
	}
	return relay.Batch{Messages: msgs, Deadline: o.validUntil, Token: claimToken{req.Owner}}, nil
}

// renew registers the owner as alive, renews its leases and takes or gives
// back shards to hold its even share, in one short transaction. The caller
// holds o.mu.
func (s *Store) renew(ctx context.Context, owner string, o *ownerLease) error {
	start := time.Now()
	ttl := s.cfg.LeaseTTL
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("hooks: lease: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // no-op after Commit
	q := s.leaseSQL()
	now, until := s.clock(start, ttl)
	if _, err := tx.ExecContext(ctx, q.register, append(until, owner)...); err != nil {
		return fmt.Errorf("hooks: lease: register relay: %w", err)
	}
	var alive int
	if err := tx.QueryRowContext(ctx, q.alive, now...).Scan(&alive); err != nil {
		return fmt.Errorf("hooks: lease: count relays: %w", err)
	}
	owned, err := scanShards(tx.QueryContext(ctx, q.renew, append(until, owner)...))
	if err != nil {
		return fmt.Errorf("hooks: lease: renew: %w", err)
	}
	target := (Shards + max(alive, 1) - 1) / max(alive, 1)
	switch {
	case len(owned) > target:
		give := owned[target:]
		if _, err := tx.ExecContext(ctx, q.release+" AND shard IN ("+shardList(give)+")", owner); err != nil {
			return fmt.Errorf("hooks: lease: give back shards: %w", err)
		}
		owned = owned[:target]
	case len(owned) < target:
		got, err := scanShards(tx.QueryContext(ctx, q.acquire, append(append(until, owner), append(now, target-len(owned))...)...))
		if err != nil {
			return fmt.Errorf("hooks: lease: take shards: %w", err)
		}
		owned = append(owned, got...)
		slices.Sort(owned)
	}
	if _, err := tx.ExecContext(ctx, q.forget, now...); err != nil {
		return fmt.Errorf("hooks: lease: forget stopped relays: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("hooks: lease: commit: %w", err)
	}
	o.shards = owned
	// The database's expiry is its now() plus ttl, and its now() came after
	// start: start plus ttl, less a margin for clock rate, is on the safe
	// side.
	o.validUntil = start.Add(ttl - ttl/10)
	// Renewing also rebalances (a relay that joined or left changes every
	// share), so do it at least every second.
	every := min(ttl/5, time.Second)
	if len(owned) < target {
		every = min(every, 250*time.Millisecond) // still taking its share
	}
	o.nextRenew = start.Add(every)
	return nil
}

// clock returns the arguments of the lease statements: now, and now plus
// ttl. PostgreSQL uses its own clock (and these are empty); SQLite uses the
// process's, as unix microseconds.
func (s *Store) clock(now time.Time, ttl time.Duration) (nowArgs, untilArgs []any) {
	if s.dialect.name == "postgres" {
		return nil, []any{ttl.Microseconds()}
	}
	return []any{now.UnixMicro()}, []any{now.Add(ttl).UnixMicro()}
}

// leaseStatements are the statements of the lease bookkeeping. Their
// arguments: register (until..., owner), alive (now...), renew (until...,
// owner), release (owner), acquire (until..., owner, now..., count),
// forget (now...).
type leaseStatements struct {
	register, alive, renew, release, acquire, forget string
}

func (s *Store) leaseSQL() leaseStatements {
	if s.dialect.name == "postgres" {
		until := "now() + $1 * interval '1 microsecond'"
		return leaseStatements{
			register: `INSERT INTO ` + s.relays + ` (owner, expires_at) VALUES ($2, ` + until + `)
				ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at`,
			alive:   `SELECT count(*) FROM ` + s.relays + ` WHERE expires_at > now()`,
			renew:   `UPDATE ` + s.leases + ` SET expires_at = ` + until + ` WHERE owner = $2 RETURNING shard`,
			release: `UPDATE ` + s.leases + ` SET owner = NULL, expires_at = NULL WHERE owner = $1`,
			acquire: `UPDATE ` + s.leases + ` SET owner = $2, expires_at = ` + until + `
				WHERE shard IN (SELECT shard FROM ` + s.leases + ` WHERE owner IS NULL OR expires_at <= now()
					ORDER BY shard LIMIT $3 FOR UPDATE SKIP LOCKED)
				RETURNING shard`,
			forget: `DELETE FROM ` + s.relays + ` WHERE expires_at < now() - interval '1 hour'`,
		}
	}
	return leaseStatements{
		register: `INSERT INTO ` + s.relays + ` (owner, expires_at) VALUES (?2, ?1)
			ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at`,
		alive:   `SELECT count(*) FROM ` + s.relays + ` WHERE expires_at > ?`,
		renew:   `UPDATE ` + s.leases + ` SET expires_at = ?1 WHERE owner = ?2 RETURNING shard`,
		release: `UPDATE ` + s.leases + ` SET owner = NULL, expires_at = NULL WHERE owner = ?`,
		acquire: `UPDATE ` + s.leases + ` SET owner = ?2, expires_at = ?1
			WHERE shard IN (SELECT shard FROM ` + s.leases + ` WHERE owner IS NULL OR expires_at <= ?3
				ORDER BY shard LIMIT ?4)
			RETURNING shard`,
		forget: `DELETE FROM ` + s.relays + ` WHERE expires_at < ?1 - 3600000000`,
	}
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

// shardList is a comma-separated list of shards, safe to splice into SQL.
func shardList(shards []int16) string {
	parts := make([]string, len(shards))
	for i, sh := range shards {
		parts[i] = strconv.Itoa(int(sh))
	}
	return strings.Join(parts, ", ")
}

// Release implements [relay.Releaser]: it gives back owner's shards and
// unregisters it, so other relays take its share over at their next renewal.
func (s *Store) Release(ctx context.Context, owner string) error {
	s.mu.Lock()
	o := s.owners[owner]
	delete(s.owners, owner)
	s.mu.Unlock()
	if o != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.shards, o.validUntil = nil, time.Time{}
	}
	q := s.leaseSQL()
	if _, err := s.db.ExecContext(ctx, q.release, owner); err != nil {
		return fmt.Errorf("hooks: release leases: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM `+s.relays+` WHERE owner = `+s.dialect.ph(1), owner); err != nil {
		return fmt.Errorf("hooks: release leases: %w", err)
	}
	return nil
}

// selectClaimable reads the claimable rows of shards (see [Store]).
func (s *Store) selectClaimable(ctx context.Context, shards []int16, limit int, maxBytes int64) ([]runtime.OutboxMessage, error) {
	if maxBytes <= 0 {
		maxBytes = 1 << 62
	}
	shardFilter := ""
	if len(shards) < Shards {
		shardFilter = " AND o.shard IN (" + shardList(shards) + ")"
	}
	var q string
	var args []any
	if s.dialect.name == "postgres" {
		q = `WITH b AS MATERIALIZED (SELECT DISTINCT aggregate_type, aggregate_id FROM ` + s.table + `
				WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at > now()))
			SELECT ` + selectColumns + ` FROM (
				SELECT c.*, sum(octet_length(c.payload)) OVER (ORDER BY c.id) AS run FROM (
					SELECT ` + selectColumns + ` FROM ` + s.table + ` o
					WHERE o.published_at IS NULL AND o.parked_at IS NULL` + shardFilter + `
					AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM b)
					ORDER BY o.id LIMIT $1) c) x
			WHERE run - octet_length(payload) < $2 ORDER BY id`
		args = []any{limit, maxBytes}
	} else {
		q = `SELECT ` + selectColumns + ` FROM (
				SELECT c.*, sum(length(CAST(c.payload AS BLOB))) OVER (ORDER BY c.id) AS run FROM (
					SELECT ` + selectColumns + ` FROM ` + s.table + ` o
					WHERE o.published_at IS NULL AND o.parked_at IS NULL` + shardFilter + `
					AND (o.aggregate_type, o.aggregate_id) NOT IN (SELECT aggregate_type, aggregate_id FROM ` + s.table + `
						WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at > ?1))
					ORDER BY o.id LIMIT ?2) c) x
			WHERE run - length(CAST(payload AS BLOB)) < ?3 ORDER BY id`
		args = []any{time.Now().UnixMicro(), limit, maxBytes}
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("hooks: claim: select pending: %w", err)
	}
	defer rows.Close()
	msgs := make([]runtime.OutboxMessage, 0, min(limit, 1024))
	for rows.Next() {
		var (
			m        runtime.OutboxMessage
			id       string
			payload  []byte
			headers  sql.NullString
			occurred time.Time
			created  time.Time
		)
		if err := rows.Scan(&m.ID, &id, &m.EventType, &m.EventVersion, &m.AggregateType, &m.AggregateID,
			&m.Topic, &payload, &headers, &occurred, &created, &m.Attempts); err != nil {
			return nil, fmt.Errorf("hooks: claim: scan: %w", err)
		}
		if m.EventID, err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("hooks: claim: row %d: event id %q: %w", m.ID, id, err)
		}
		if headers.Valid && headers.String != "" && headers.String != "null" {
			if err := json.Unmarshal([]byte(headers.String), &m.Headers); err != nil {
				return nil, fmt.Errorf("hooks: claim: row %d: headers: %w", m.ID, err)
			}
		}
		m.Payload = payload
		m.OccurredAt = occurred.UTC()
		m.CreatedAt = created.UTC()
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("hooks: claim: select pending: %w", err)
	}
	return msgs, nil
}

// failureKind is how a failed message is recorded.
type failureKind int

const (
	failOutage  failureKind = iota // nothing was published: delay, no attempt
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
		return fmt.Errorf("hooks: mark: the batch's token is %T, not this store's", b.Token)
	}
	if err := s.markPublished(ctx, tok.owner, o.Published); err != nil {
		return err
	}
	if len(o.Failed) == 0 {
		return nil
	}
	// Record the failure on each aggregate's first failed message; the
	// others wait behind it.
	byID := make(map[int64]*runtime.OutboxMessage, len(b.Messages))
	for i := range b.Messages {
		byID[b.Messages[i].ID] = &b.Messages[i]
	}
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
			return fmt.Errorf("hooks: mark: failed id %d is not in the batch", f.ID)
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
		case len(o.Published) > 0:
			g.kind = failAttempt
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], f.ID)
	}
	for _, g := range order {
		set, args := s.failureSet(g.kind, g.text)
		if err := s.updateFenced(ctx, tok.owner, set, args, groups[g]); err != nil {
			return fmt.Errorf("hooks: mark: record failed attempt: %w", err)
		}
	}
	return nil
}

type aggKey struct{ typ, id string }

// markPublished marks ids as published, fenced by owner's leases.
func (s *Store) markPublished(ctx context.Context, owner string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	set, args := "published_at = now()", []any(nil) // the database's clock, as DeletePublished compares it
	if s.dialect.name == "sqlite" {
		set, args = "published_at = ?", []any{time.Now().UTC()}
	}
	if err := s.updateFenced(ctx, owner, set, args, ids); err != nil {
		return fmt.Errorf("hooks: mark published: %w", err)
	}
	return nil
}

// updateFenced runs "UPDATE table SET set WHERE id IN ids" for the pending
// rows of ids in shards that owner holds.
func (s *Store) updateFenced(ctx context.Context, owner string, set string, setArgs []any, ids []int64) error {
	if s.dialect.name == "postgres" {
		n := len(setArgs)
		q := `UPDATE ` + s.table + ` AS o SET ` + set + `
			FROM (SELECT set_config('synchronous_commit', 'off', true)) AS sc
			WHERE o.id = ANY($` + strconv.Itoa(n+1) + `) AND o.published_at IS NULL
			AND o.shard IN (SELECT shard FROM ` + s.leases + ` WHERE owner = $` + strconv.Itoa(n+2) + `)`
		_, err := s.db.ExecContext(ctx, q, append(setArgs, ids, owner)...)
		return err
	}
	const chunk = 500
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		args := append([]any(nil), setArgs...)
		for _, id := range part {
			args = append(args, id)
		}
		args = append(args, owner)
		q := `UPDATE ` + s.table + ` SET ` + set + ` WHERE id IN (?` + strings.Repeat(", ?", len(part)-1) + `)
			AND published_at IS NULL AND shard IN (SELECT shard FROM ` + s.leases + ` WHERE owner = ?)`
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// failureSet returns the SET clause (and its arguments, numbered from 1)
// that records a failure of kind with the error text.
func (s *Store) failureSet(kind failureKind, text string) (string, []any) {
	delay, maxDelay := s.cfg.RetryDelay.Microseconds(), s.cfg.MaxRetryDelay.Microseconds()
	if s.dialect.name == "postgres" {
		switch kind {
		case failPark:
			return `attempts = o.attempts + 1, last_error = $1, parked_at = now()`, []any{text}
		case failAttempt:
			return `attempts = o.attempts + 1, last_error = $1,
				next_attempt_at = now() + least($2::float8 * power(2, least(o.attempts, 30)), $3::float8) * interval '1 microsecond',
				parked_at = CASE WHEN $4::int > 0 AND o.attempts + 1 >= $4::int THEN now() END`,
				[]any{text, delay, maxDelay, s.cfg.MaxAttempts}
		default:
			return `last_error = $1, next_attempt_at = now() + $2 * interval '1 microsecond'`, []any{text, delay}
		}
	}
	now := time.Now()
	switch kind {
	case failPark:
		return `attempts = attempts + 1, last_error = ?, parked_at = ?`, []any{text, now.UTC()}
	case failAttempt:
		return `attempts = attempts + 1, last_error = ?,
			next_attempt_at = ? + min(? * (1 << min(attempts, 30)), ?),
			parked_at = CASE WHEN ? > 0 AND attempts + 1 >= ? THEN ? END`,
			[]any{text, now.UnixMicro(), delay, maxDelay, s.cfg.MaxAttempts, s.cfg.MaxAttempts, now.UTC()}
	default:
		return `last_error = ?, next_attempt_at = ?`, []any{text, now.UnixMicro() + delay}
	}
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
		return n, fmt.Errorf("hooks: unpark: %w", err)
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
		return n, fmt.Errorf("hooks: discard: %w", err)
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
// batch rows per statement (default 1,000 when batch <= 0), and returns how
// many it deleted. Run it periodically; keep olderThan longer than any
// in-memory aggregate lives after its save, because the outbox row is what
// deduplicates a second save of the same pending event (see the package
// documentation).
func (s *Store) DeletePublished(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	// The cutoff uses the clock that wrote published_at: the database's on
	// PostgreSQL, the process's on SQLite.
	var cutoff any = time.Now().Add(-olderThan).UTC()
	cutoffSQL := s.dialect.ph(1)
	if s.dialect.name == "postgres" {
		cutoff, cutoffSQL = olderThan.Microseconds(), `now() - $1 * interval '1 microsecond'`
	}
	// Published rows are mostly the oldest: walk the primary key from the
	// start rather than keep an index on published_at, which would cost
	// every mark an index insertion.
	q := `DELETE FROM ` + s.table + ` WHERE id IN (SELECT id FROM ` + s.table +
		` WHERE published_at IS NOT NULL AND published_at < ` + cutoffSQL + ` ORDER BY id LIMIT ` + s.dialect.ph(2) + `)`
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, q, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("hooks: delete published: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("hooks: delete published: %w", err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Stats is the state of the outbox table, for monitoring: the three figures
// to watch are how many messages are pending, how long the oldest has been
// waiting, and how many failed or were parked.
type Stats struct {
	// Pending counts messages not yet published and not parked.
	Pending int64
	// Retrying counts pending messages that failed at least once.
	Retrying int64
	// Parked counts messages set aside after a permanent failure or too
	// many attempts (see [Store.Unpark] and [Store.Discard]).
	Parked int64
	// OldestPending is the age of the oldest pending message (zero when
	// none), measured on the database's clock on PostgreSQL.
	OldestPending time.Duration
}

// Stats reads the outbox's [Stats] with one query over the pending and
// parked rows' partial indexes; published rows are not read. On a large
// backlog it counts every pending row: call it at scrape intervals, not per
// message.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	pending := `FROM ` + s.table + ` WHERE published_at IS NULL AND parked_at IS NULL`
	age := `COALESCE(EXTRACT(EPOCH FROM now() - (SELECT min(created_at) ` + pending + `)), 0)`
	if s.dialect.name == "sqlite" {
		age = `COALESCE((julianday('now') - julianday((SELECT min(created_at) ` + pending + `))) * 86400, 0)`
	}
	q := `SELECT (SELECT count(*) ` + pending + `),
		(SELECT count(*) ` + pending + ` AND attempts > 0),
		(SELECT count(*) FROM ` + s.table + ` WHERE parked_at IS NOT NULL AND published_at IS NULL),
		` + age
	var st Stats
	var seconds float64
	if err := s.db.QueryRowContext(ctx, q).Scan(&st.Pending, &st.Retrying, &st.Parked, &seconds); err != nil {
		return Stats{}, fmt.Errorf("hooks: stats: %w", err)
	}
	if seconds > 0 {
		st.OldestPending = time.Duration(seconds * float64(time.Second))
	}
	return st, nil
}
