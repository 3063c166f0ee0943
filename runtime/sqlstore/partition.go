package sqlstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Default values of the [PartitionConfig] fields.
const (
	// DefaultPartitionInterval is the default width of a partition.
	DefaultPartitionInterval = 24 * time.Hour
	// DefaultPartitionsAhead is the default number of partitions kept
	// ready after the current one.
	DefaultPartitionsAhead = 3
	// DefaultPartitionLockTimeout is how long creating or dropping a
	// partition waits for its lock by default.
	DefaultPartitionLockTimeout = 200 * time.Millisecond
)

// ErrNotPartitioned is wrapped by the error of [Migrate]
// when the table already exists and is not partitioned: partitioning is
// chosen when the table is created.
var ErrNotPartitioned = errors.New("sqlstore: the outbox table exists and is not partitioned")

// PartitionConfig configures a partitioned outbox table (PostgreSQL only):
// see "Partitioned outbox" in the package documentation.
type PartitionConfig struct {
	// Interval is the width of one partition, in event time: partition
	// bounds are multiples of it since the Unix epoch, in whole
	// milliseconds. Pick it so that a partition holds between a few hours
	// and a day of events; retention drops a partition once its newest
	// possible event is older than the retention age. At least one
	// minute. Default: the width of the newest partition, so that a
	// [Retention] and later migrations need not repeat the first
	// migration's setting, or 24 hours ([DefaultPartitionInterval]) when
	// there is none. A new Interval applies from the first interval that
	// overlaps no existing partition; the parts of the intervals before it
	// that no existing partition covers get partitions of their own (the
	// rest of the day, when a daily Interval follows hourly partitions).
	Interval time.Duration

	// Ahead is how many partitions after the current one are kept ready,
	// so that events keep landing in a time partition while retention
	// (which creates them) is not running. Default: 3
	// ([DefaultPartitionsAhead]).
	Ahead int

	// LockTimeout is how long creating or dropping a partition waits for
	// its lock on the outbox table (PostgreSQL's lock_timeout): the lock
	// is brief, but while it waits (behind a long transaction that wrote
	// to the outbox, say) writers queue behind it. A partition that could
	// not be locked in time is dropped or created at the next pass.
	// Default: 200ms ([DefaultPartitionLockTimeout]).
	LockTimeout time.Duration
}

func (c *PartitionConfig) setDefaults() {
	if c.Ahead == 0 {
		c.Ahead = DefaultPartitionsAhead
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = DefaultPartitionLockTimeout
	}
}

// Validate reports whether the configuration is usable; a zero Interval is.
func (c PartitionConfig) Validate() error {
	switch {
	case c.Interval != 0 && c.Interval < time.Minute:
		return fmt.Errorf("%w: partition: Interval %v is shorter than a minute", ErrInvalidConfig, c.Interval)
	case c.Interval%time.Millisecond != 0:
		return fmt.Errorf("%w: partition: Interval %v is not a whole number of milliseconds", ErrInvalidConfig, c.Interval)
	case c.Ahead < 0 || c.LockTimeout < 0:
		return fmt.Errorf("%w: partition: Ahead and LockTimeout must not be negative", ErrInvalidConfig)
	}
	return nil
}

// EventIDBound returns the smallest UUIDv7 of the millisecond of t: its
// 48-bit Unix millisecond timestamp followed by zero bits. UUIDv7 event ids
// ([runtime.NewEventID]) sort by time as PostgreSQL compares uuid values, so
// the ids of the events of [a, b) are those from EventIDBound(a) up to, not
// including, EventIDBound(b): the bounds of a partition.
func EventIDBound(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	return u
}

// boundTime is the time of a partition bound (the inverse of EventIDBound).
func boundTime(u uuid.UUID) time.Time {
	var ms [8]byte
	copy(ms[2:], u[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC()
}

// partitionedDDL is the outbox of ddl with the table partitioned by range
// of event_id: the primary key includes it, as every unique index of a
// partitioned table must, and so does the event id index, which stays
// unique across the whole table. A DEFAULT partition takes the rows whose
// event id falls in no time partition (ids of other versions, or past the
// partitions created ahead). The indexes, tables and sequence that follow
// are the plain table's, created on the partitioned table.
func (d postgresDialect) partitionedDDL(table string) []string {
	plain := d.baseDDL(table)
	create := strings.Replace(plain[0], "BIGSERIAL PRIMARY KEY", "BIGSERIAL", 1)
	create = strings.TrimSuffix(create, "\n)") + ",\n\tPRIMARY KEY (id, event_id)\n) PARTITION BY RANGE (event_id)"
	return append([]string{
		create,
		`CREATE TABLE IF NOT EXISTS ` + defaultPartition(table) + ` PARTITION OF ` + table + ` DEFAULT`,
		pendingIndexDDL(table),
	}, plain[2:]...) // plain[1] upgrades tables of earlier versions
}

// defaultPartition names a partitioned outbox's DEFAULT partition.
func defaultPartition(table string) string { return qualify(table, baseName(table)+"_default") }

// partitionName names the partition that starts at start: the table's name
// and the start's UTC date and time, which fit in 63 bytes with any valid
// outbox table name.
func partitionName(table string, start time.Time) string {
	return qualify(table, baseName(table)+"_"+strings.ToLower(start.UTC().Format("20060102t1504")))
}

// migratePartitionedOutbox is [Migrate] for PostgreSQL with the outbox
// table partitioned by time (see "Partitioned outbox" in the package
// documentation), for a table that does not exist yet: it creates the
// partitioned table, its DEFAULT partition and the partitions of the
// current interval and cfg.Ahead after it. On a partitioned table it
// creates missing partitions ahead, so it is safe to run on every start;
// on an existing table that is not partitioned it changes nothing and
// returns an error wrapping [ErrNotPartitioned] (partitioning an existing
// table means copying it: create a new table and move the writers over).
// [Migrate] on a partitioned table is harmless, and [NewStore],
// [NewWriter] and [NewRetention] need nothing more. An empty table means
// [DefaultTable].
func migratePartitionedOutbox(ctx context.Context, db DB, table string, cfg PartitionConfig) error {
	if nilDB(db) {
		return errNilDB
	}
	if table == "" {
		table = DefaultTable
	}
	if err := CheckTable(table, MaxOutboxTableName); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.setDefaults()
	d := postgresDialect{}
	err := inTx(ctx, db, func(tx Tx) error {
		if _, err := tx.ExecContext(ctx, d.migrateLock(table)); err != nil {
			return fmt.Errorf("sqlstore: migrate partitioned outbox: %w", err)
		}
		var exists, partitioned bool
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL,
			EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))`, table).Scan(&exists, &partitioned); err != nil {
			return fmt.Errorf("sqlstore: migrate partitioned outbox: %w", err)
		}
		if exists && !partitioned {
			return fmt.Errorf("%w: %s", ErrNotPartitioned, table)
		}
		for _, s := range d.partitionedDDL(table) {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("sqlstore: migrate partitioned outbox: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	m := partitionMaintenance{db: db, table: table, cfg: cfg}
	if _, err := m.createAhead(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate partitioned outbox: %w", err)
	}
	return nil
}

// partition is one partition of a partitioned outbox table.
type partition struct {
	name      string // as regclass prints it: qualified unless on the search_path
	isDefault bool
	// from and to are the bounds' times; ok is false for bounds that are
	// not UUIDs (MINVALUE, MAXVALUE).
	from, to time.Time
	ok       bool
	rows     int64 // pg_class.reltuples, an estimate
}

var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)$`)

// partitionMaintenance creates partitions ahead and drops old ones.
type partitionMaintenance struct {
	db    DB
	table string
	cfg   PartitionConfig // Interval may be zero: the newest partition's width
}

// list returns the table's partitions and the database's clock.
func (m partitionMaintenance) list(ctx context.Context) ([]partition, time.Time, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT c.oid::regclass::text, pg_get_expr(c.relpartbound, c.oid), c.reltuples::int8, now()
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, m.table)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list partitions of %s: %w", m.table, err)
	}
	defer rows.Close()
	var (
		out []partition
		now time.Time
	)
	for rows.Next() {
		var p partition
		var bound string
		if err := rows.Scan(&p.name, &bound, &p.rows, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("list partitions of %s: %w", m.table, err)
		}
		if bound == "DEFAULT" {
			p.isDefault = true
		} else if b := boundRE.FindStringSubmatch(bound); b != nil {
			from, err1 := uuid.Parse(b[1])
			to, err2 := uuid.Parse(b[2])
			p.from, p.to, p.ok = boundTime(from), boundTime(to), err1 == nil && err2 == nil
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("list partitions of %s: %w", m.table, err)
	}
	if now.IsZero() { // no partition at all
		if err := m.db.QueryRowContext(ctx, `SELECT now()`).Scan(&now); err != nil {
			return nil, time.Time{}, fmt.Errorf("database clock: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b partition) int { return a.from.Compare(b.from) })
	return out, now, nil
}

// interval is the configured width, or the newest time partition's, or
// the default.
func (m partitionMaintenance) interval(parts []partition) time.Duration {
	if m.cfg.Interval > 0 {
		return m.cfg.Interval
	}
	for i := len(parts) - 1; i >= 0; i-- {
		if p := parts[i]; p.ok && p.to.After(p.from) {
			return p.to.Sub(p.from)
		}
	}
	return DefaultPartitionInterval
}

// createdAhead is what createAhead did.
type createdAhead struct {
	created int   // partitions created
	moved   int64 // rows moved into them from the DEFAULT partition
}

// createAhead creates the partitions of the current interval and of
// cfg.Ahead after it that overlap no existing partition, and returns how
// many it created and how many rows it moved into them from the DEFAULT
// partition (see create). It goes on after a failure and returns the
// failures.
func (m partitionMaintenance) createAhead(ctx context.Context) (createdAhead, error) {
	var res createdAhead
	parts, now, err := m.list(ctx)
	if err != nil {
		return res, err
	}
	def := ""
	if i := slices.IndexFunc(parts, func(p partition) bool { return p.isDefault }); i >= 0 {
		def = parts[i].name
	}
	step := m.interval(parts)
	first := time.UnixMilli(now.UnixMilli() - now.UnixMilli()%step.Milliseconds()).UTC()
	var errs []error
	for k := 0; k <= m.cfg.Ahead; k++ {
		from := first.Add(time.Duration(k) * step)
		for _, gap := range uncovered(parts, from, from.Add(step)) {
			moved, err := m.create(ctx, def, gap[0], gap[1])
			if err != nil {
				errs = append(errs, fmt.Errorf("create partition %s of %s for [%s, %s): %w",
					partitionName(m.table, gap[0]), m.table, gap[0].Format(time.RFC3339), gap[1].Format(time.RFC3339), err))
				continue
			}
			res.created++
			res.moved += moved
		}
	}
	return res, errors.Join(errs...)
}

// uncovered returns the parts of [from, to) that no time partition of parts
// covers, in order: the whole range when none overlaps it, and otherwise
// the gaps between those that do. Partitions of another width (a changed
// Interval) so leave no stretch of time to the DEFAULT partition: a day's
// interval beside hourly partitions gets the rest of the day.
func uncovered(parts []partition, from, to time.Time) [][2]time.Time {
	var over []partition
	for _, p := range parts {
		if p.ok && p.from.Before(to) && from.Before(p.to) {
			over = append(over, p)
		}
	}
	slices.SortFunc(over, func(a, b partition) int { return a.from.Compare(b.from) })
	var gaps [][2]time.Time
	at := from
	for _, p := range over {
		if at.Before(p.from) {
			gaps = append(gaps, [2]time.Time{at, p.from})
		}
		if p.to.After(at) {
			at = p.to
		}
	}
	if at.Before(to) {
		gaps = append(gaps, [2]time.Time{at, to})
	}
	return gaps
}

// create creates the partition of [from, to) in one transaction. When the
// DEFAULT partition def ("" when there is none) holds rows of that range
// (events written past the partitions created ahead while retention did
// not run, a writer's clock far ahead, or ids of other versions that fall
// in it), PostgreSQL refuses to create it (SQLSTATE 23514: the DEFAULT
// partition's new constraint would be violated), pass after pass. Those
// rows are then moved into the new partition: the transaction locks the
// outbox table (as creating a partition does anyway, waiting at most
// cfg.LockTimeout), creates the partition as a plain table, moves the
// range's rows into it, unchanged (ids, pending or published, attempts),
// and attaches it. It returns how many rows it moved.
func (m partitionMaintenance) create(ctx context.Context, def string, from, to time.Time) (int64, error) {
	name := partitionName(m.table, from)
	lo, hi := EventIDBound(from).String(), EventIDBound(to).String()
	bounds := ` FOR VALUES FROM ('` + lo + `') TO ('` + hi + `')`
	var moved int64
	err := m.locked(ctx, func(tx Tx) error {
		moved = 0
		crowded := false
		if def != "" {
			// The lock that creating the partition takes anyway, taken
			// first: statements on the table that would otherwise plan
			// while the rows move (locking the partitions of the list
			// they read before the new one is attached, so a claim could
			// miss a moved event and publish its aggregate's next one
			// first) wait for the commit, then see the new partition.
			if _, err := tx.ExecContext(ctx, `LOCK TABLE `+m.table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return fmt.Errorf("lock %s: %w", m.table, err)
			}
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+def+` WHERE event_id >= $1 AND event_id < $2)`,
				lo, hi).Scan(&crowded); err != nil {
				return fmt.Errorf("look for rows of the range in the DEFAULT partition %s: %w", def, err)
			}
		}
		if !crowded {
			_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+name+` PARTITION OF `+m.table+bounds)
			return err
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE `+name+` (LIKE `+m.table+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, `WITH moved AS (DELETE FROM `+def+` WHERE event_id >= $1 AND event_id < $2 RETURNING *)
			INSERT INTO `+name+` SELECT * FROM moved`, lo, hi)
		if err != nil {
			return fmt.Errorf("move the range's rows from the DEFAULT partition %s: %w", def, err)
		}
		if moved, err = r.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `ALTER TABLE `+m.table+` ATTACH PARTITION `+name+bounds)
		return err
	})
	return moved, err
}

// locked runs fn in a transaction whose lock waits end after
// cfg.LockTimeout.
func (m partitionMaintenance) locked(ctx context.Context, fn func(Tx) error) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	ms := strconv.FormatInt(max(m.cfg.LockTimeout.Milliseconds(), 1), 10)
	if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, ms); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// errKept is returned inside a drop's transaction to roll it back.
var errKept = errors.New("partition holds unpublished rows")

// dropResult is what dropOld did.
type dropResult struct {
	dropped     int
	kept        []string // partitions kept for their unpublished rows
	rows        int64    // estimated rows of the dropped partitions
	defaultName string   // "" when there is no DEFAULT partition
	listed      bool     // the partitions could be listed
}

// dropOld drops the time partitions whose every event is older than age
// (the partition's upper bound is before the database's now() minus age)
// and that hold no unpublished row. Each drop is one transaction: it
// detaches the partition (which waits for the transactions using the table
// and holds every other off until it commits, so no row can arrive), checks
// on the partial indexes that no row is pending, retrying or parked, and
// drops it; a partition that holds one is kept (and attached again by the
// rollback). It goes on after a failure and returns the failures.
func (m partitionMaintenance) dropOld(ctx context.Context, age time.Duration) (dropResult, error) {
	var res dropResult
	parts, now, err := m.list(ctx)
	if err != nil {
		return res, err
	}
	res.listed = true
	cutoff := now.Add(-age)
	var errs []error
	for _, p := range parts {
		if p.isDefault {
			res.defaultName = p.name
		}
		if !p.ok || p.to.After(cutoff) {
			continue
		}
		err := m.locked(ctx, func(tx Tx) error {
			if _, err := tx.ExecContext(ctx, `ALTER TABLE `+m.table+` DETACH PARTITION `+p.name); err != nil {
				return err
			}
			var unpublished bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+p.name+` WHERE published_at IS NULL AND parked_at IS NULL)
				OR EXISTS (SELECT 1 FROM `+p.name+` WHERE parked_at IS NOT NULL AND published_at IS NULL)`).Scan(&unpublished); err != nil {
				return err
			}
			if unpublished {
				return errKept
			}
			_, err := tx.ExecContext(ctx, `DROP TABLE `+p.name)
			return err
		})
		switch {
		case errors.Is(err, errKept):
			res.kept = append(res.kept, p.name)
		case err != nil:
			errs = append(errs, fmt.Errorf("drop partition %s of %s: %w", p.name, m.table, err))
		default:
			res.dropped++
			res.rows += max(p.rows, 0)
		}
	}
	return res, errors.Join(errs...)
}
