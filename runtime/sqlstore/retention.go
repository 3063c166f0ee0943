package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Default values of the [RetentionConfig] fields.
const (
	// DefaultRetentionAge is the default PublishedAge and InboxAge.
	DefaultRetentionAge = 7 * 24 * time.Hour
	// DefaultRetentionInterval is the default Interval between passes.
	DefaultRetentionInterval = time.Minute
	// DefaultRetentionBatchSize is the default BatchSize.
	DefaultRetentionBatchSize = 1000
)

// RetentionConfig configures a [Retention]. The zero value, with a store,
// deletes published outbox rows older than 7 days every minute.
type RetentionConfig struct {
	// PublishedAge is how long published outbox rows are kept. Keep it
	// longer than any in-memory aggregate lives after its save (the outbox
	// row deduplicates a second save of the same pending event) and than
	// the window you may want to replay ([Store.Replay]).
	// Default: 7 days ([DefaultRetentionAge]).
	PublishedAge time.Duration

	// Inbox and InboxDB are the consumers' inbox to prune, and the
	// database it lives on (often not the outbox's). Default: nil, the
	// inbox is not pruned.
	Inbox   *Inbox
	InboxDB DB

	// InboxAge is how long inbox markers are kept: a redelivery of an
	// event whose marker is gone is applied again, so keep it longer than
	// the topic's retention and any replay. Default: 7 days
	// ([DefaultRetentionAge]).
	InboxAge time.Duration

	// InboxConsumers are the consumers whose markers are pruned.
	// Default: nil, every consumer that has markers ([Inbox.Consumers]).
	InboxConsumers []string

	// Interval is the time between the end of one pass and the start of
	// the next. Default: 1 minute ([DefaultRetentionInterval]).
	Interval time.Duration

	// BatchSize is the most rows one statement deletes; each batch is its
	// own short transaction. Default: 1000 ([DefaultRetentionBatchSize]).
	BatchSize int

	// BatchPause is a pause between two batches of one pass, to leave the
	// database to the application while a large backlog of old rows is
	// deleted. Default: 0, no pause.
	BatchPause time.Duration

	// Logger receives a Debug record per pass that deleted nothing, an
	// Info record per pass that deleted rows, and a Warn record per failed
	// pass. Default: nil, [slog.Default].
	Logger *slog.Logger

	// OnPass, when set, is called after every pass with its result (for
	// metrics). Default: nil.
	OnPass func(RetentionResult)

	// Partitions configures the retention of a partitioned outbox table
	// (PostgreSQL, [Migrate]), which a pass detects: it
	// creates the partitions ahead, drops the partitions whose events are
	// all older than PublishedAge and published, and deletes published
	// rows older than PublishedAge batch by batch from the DEFAULT
	// partition only. Default: the zero [PartitionConfig] (the newest
	// partition's width, 3 partitions ahead, 200ms lock timeout).
	Partitions PartitionConfig
}

// RetentionResult is what one pass of a [Retention] did.
type RetentionResult struct {
	// Published is how many published outbox rows it deleted.
	Published int64
	// Inbox is how many inbox markers it deleted.
	Inbox int64
	// Batches is how many delete statements it ran.
	Batches int
	// Duration is how long the pass took.
	Duration time.Duration
	// PartitionsDropped and PartitionsCreated are how many partitions of a
	// partitioned outbox the pass dropped and created ahead.
	PartitionsDropped, PartitionsCreated int
	// PartitionsKept names the partitions old enough to drop that the pass
	// kept because they hold a pending, retrying or parked row.
	PartitionsKept []string
	// PartitionRows is the number of rows in the dropped partitions, as
	// PostgreSQL estimates it (pg_class.reltuples, from the last VACUUM or
	// ANALYZE); they are not counted in Published.
	PartitionRows int64
	// PartitionRowsMoved is the number of rows the pass moved from the
	// DEFAULT partition into a partition it created: rows of that
	// partition's range (written past the partitions created ahead, say,
	// while no retention ran) that would otherwise keep PostgreSQL from
	// creating it.
	PartitionRowsMoved int64
	// Err is the pass's error, or nil.
	Err error
}

// Retention deletes published outbox rows and old inbox markers on a
// schedule, in small batches: each batch is one short transaction that
// waits for no row another transaction holds (see [Store.DeletePublished]
// for each database's locking), so writers and the relay never wait for
// it beyond one batch of SQLite's single write lock. A pass first finds the
// last row created before PublishedAge by a binary search over the primary
// key, and deletes only up to it, so a pass with nothing to delete costs a
// few dozen point reads, not a walk over the young published rows. Run it beside the relay
// (the operator command's "relay --retention") or on its own; several
// can run at once. On a partitioned PostgreSQL outbox
// ([Migrate]) it drops whole partitions instead: see
// "Partitioned outbox" in the package documentation.
type Retention struct {
	store *Store
	cfg   RetentionConfig
	log   *slog.Logger
}

// NewRetention returns the retention of store's outbox (store may be nil
// when only cfg.Inbox is pruned), or an error for a configuration that would
// prune nothing or is invalid.
func NewRetention(store *Store, cfg RetentionConfig) (*Retention, error) {
	switch {
	case store == nil && cfg.Inbox == nil:
		return nil, fmt.Errorf("%w: retention: neither a store nor an inbox to prune", ErrInvalidConfig)
	case (cfg.Inbox == nil) != (cfg.InboxDB == nil):
		return nil, fmt.Errorf("%w: retention: Inbox and InboxDB go together", ErrInvalidConfig)
	case cfg.PublishedAge < 0 || cfg.InboxAge < 0 || cfg.Interval < 0 || cfg.BatchSize < 0 || cfg.BatchPause < 0:
		return nil, fmt.Errorf("%w: retention: PublishedAge, InboxAge, Interval, BatchSize and BatchPause must not be negative", ErrInvalidConfig)
	}
	if err := cfg.Partitions.Validate(); err != nil {
		return nil, fmt.Errorf("sqlstore: retention: %w", err)
	}
	cfg.Partitions.setDefaults()
	if cfg.PublishedAge == 0 {
		cfg.PublishedAge = DefaultRetentionAge
	}
	if cfg.InboxAge == 0 {
		cfg.InboxAge = DefaultRetentionAge
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultRetentionInterval
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultRetentionBatchSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Retention{store: store, cfg: cfg, log: log.With(slog.String("component", "outbox.retention"))}, nil
}

// Run runs a pass at once, then one every Interval, until ctx is done; then
// it returns nil. A failed pass is logged and reported to OnPass, and the
// next runs as scheduled.
func (r *Retention) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		res := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		attrs := []any{slog.Int64("published", res.Published), slog.Int64("inbox", res.Inbox),
			slog.Int("batches", res.Batches), slog.Duration("duration", res.Duration)}
		if res.PartitionsDropped+res.PartitionsCreated+len(res.PartitionsKept) > 0 {
			attrs = append(attrs, slog.Int("partitions_dropped", res.PartitionsDropped), slog.Int64("partition_rows", res.PartitionRows),
				slog.Int("partitions_created", res.PartitionsCreated), slog.Int64("rows_moved_from_default", res.PartitionRowsMoved))
		}
		if len(res.PartitionsKept) > 0 {
			r.log.Info("retention kept old partitions that hold unpublished rows", slog.Any("partitions", res.PartitionsKept))
		}
		switch {
		case res.Err != nil:
			r.log.Warn("retention pass failed", append(attrs, slog.String("error", res.Err.Error()))...)
		case res.Published+res.Inbox > 0 || res.PartitionsDropped+res.PartitionsCreated > 0:
			r.log.Info("retention pass", attrs...)
		default:
			r.log.Debug("retention pass", attrs...)
		}
		t.Reset(r.cfg.Interval)
	}
}

// RunOnce runs one pass: it deletes every published outbox row older than
// PublishedAge and every inbox marker older than InboxAge, batch by batch,
// and returns what it did (also to OnPass). A pass cut short because ctx
// is done reports an error wrapping ctx.Err() (and the driver's error,
// which does not always say so: SQLite's is "interrupted").
func (r *Retention) RunOnce(ctx context.Context) RetentionResult {
	start := time.Now()
	var res RetentionResult
	res.Err = r.pass(ctx, &res)
	if res.Err != nil && ctx.Err() != nil && !errors.Is(res.Err, ctx.Err()) {
		res.Err = fmt.Errorf("%w: %w", ctx.Err(), res.Err)
	}
	res.Duration = time.Since(start)
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(res)
	}
	return res
}

func (r *Retention) pass(ctx context.Context, res *RetentionResult) error {
	batch := r.cfg.BatchSize
	var partErr error
	if r.store != nil {
		// On a partitioned table, only the DEFAULT partition's rows are
		// deleted one by one, with no horizon (it is small).
		table, horizon := r.store.table, int64(0)
		layout, err := r.store.layoutOf(ctx) // asked of the database once per store
		if err != nil {
			return fmt.Errorf("sqlstore: retention: %w", err)
		}
		partitioned := layout == layoutPartitioned
		if partitioned {
			var listed bool
			table, listed, partErr = r.partitions(ctx, res)
			if !listed {
				return partErr
			}
			if table != "" { // else there is no DEFAULT partition
				var err error
				if horizon, err = maxID(ctx, r.store.db, table); err != nil {
					return fmt.Errorf("sqlstore: retention: %w", err)
				}
			}
		}
		tables := storeTables{table: table}
		if !partitioned {
			var err error
			if tables, err = r.store.tablesNow(ctx); err != nil {
				return fmt.Errorf("sqlstore: retention: %w", err)
			}
			if horizon, err = r.store.createdHorizon(ctx, r.cfg.PublishedAge); err != nil {
				return fmt.Errorf("sqlstore: retention: %w", err)
			}
		}
		for horizon > 0 {
			n, err := r.store.dialect.deletePublished(ctx, r.store.db, tables, r.cfg.PublishedAge, batch, horizon)
			res.Published += n
			res.Batches++
			if err != nil {
				return fmt.Errorf("sqlstore: retention: delete published: %w", err)
			}
			if n < int64(batch) {
				break
			}
			if err := r.pause(ctx); err != nil {
				return err
			}
		}
		if tables.queue != "" && horizon > 0 {
			// Entries of rows no longer pending that the relay's mark did
			// not take out: rows published or parked by a process that
			// does not know the queue (pgcdc's park, a relay of an
			// earlier version), or deleted by hand. The claim passes over
			// them; this keeps it from walking them for good.
			if _, err := r.store.db.ExecContext(ctx, `DELETE FROM `+tables.queue+` q WHERE q.qid <= $1
				AND NOT EXISTS (SELECT 1 FROM `+tables.table+` o WHERE o.id = q.qid AND o.published_at IS NULL AND o.parked_at IS NULL)`, horizon); err != nil {
				return fmt.Errorf("sqlstore: retention: tidy the queue: %w", err)
			}
		}
	}
	if r.cfg.Inbox == nil {
		return partErr
	}
	consumers := r.cfg.InboxConsumers
	if consumers == nil {
		var err error
		if consumers, err = r.cfg.Inbox.Consumers(ctx, r.cfg.InboxDB); err != nil {
			return fmt.Errorf("sqlstore: retention: %w", err)
		}
	}
	cutoff := time.Now().Add(-r.cfg.InboxAge)
	for _, c := range consumers {
		for {
			// One batch per call, so that the pause goes between batches.
			n, err := r.cfg.Inbox.pruneBatch(ctx, r.cfg.InboxDB, c, cutoff, batch)
			res.Inbox += n
			res.Batches++
			if err != nil {
				return fmt.Errorf("sqlstore: retention: consumer %q: %w", c, err)
			}
			if n < int64(batch) {
				break
			}
			if err := r.pause(ctx); err != nil {
				return err
			}
		}
	}
	return partErr
}

// partitions creates the partitions ahead and drops the old ones of a
// partitioned outbox and records it in res. It returns the DEFAULT
// partition's name ("" when the table has none), whether it could list the
// partitions, and the failures; failures to create or drop one partition
// do not stop the pass.
func (r *Retention) partitions(ctx context.Context, res *RetentionResult) (defaultName string, listed bool, err error) {
	m := partitionMaintenance{db: r.store.db, table: r.store.table, cfg: r.cfg.Partitions}
	created, errCreate := m.createAhead(ctx)
	res.PartitionsCreated, res.PartitionRowsMoved = created.created, created.moved
	dropped, errDrop := m.dropOld(ctx, r.cfg.PublishedAge)
	res.PartitionsDropped, res.PartitionsKept, res.PartitionRows = dropped.dropped, dropped.kept, dropped.rows
	if err = errors.Join(errCreate, errDrop); err != nil {
		err = fmt.Errorf("sqlstore: retention: %w", err)
	}
	return dropped.defaultName, dropped.listed, err
}

// maxID is the largest id of table, or 0.
func maxID(ctx context.Context, db DB, table string) (int64, error) {
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(id) FROM `+table).Scan(&id); err != nil {
		return 0, fmt.Errorf("max id of %s: %w", table, err)
	}
	return id.Int64, nil
}

// pause waits BatchPause, or until ctx is done.
func (r *Retention) pause(ctx context.Context) error {
	if r.cfg.BatchPause <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(r.cfg.BatchPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("sqlstore: retention: %w", ctx.Err())
	case <-t.C:
		return nil
	}
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
	t, err := s.tablesNow(ctx)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: delete published: %w", err)
	}
	n, err := s.dialect.deletePublished(ctx, s.db, t, olderThan, batch, maxID)
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
