package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
)

// DefaultTable is the outbox table used when a table name is empty.
const DefaultTable = "outbox_messages"

// Shards is the number of shards the outbox's aggregates are hashed into.
// Each row stores its shard; relays sharing a table divide the shards between
// them with leases (see [Store]), so one aggregate is only ever published by
// one relay at a time. It is part of the table's format: every writer and
// relay of a table must agree on it.
const Shards = 64

// MaxOutboxTableName is the longest unqualified outbox table name: the
// longest name the schema derives from it (base + "_pending_shard" and the
// like) must fit in PostgreSQL's 63-byte identifiers, or PostgreSQL would
// silently truncate it and two indexes could collide.
const MaxOutboxTableName = 63 - len("_pending_shard")

// MaxInboxTableName is the longest unqualified inbox table name: a plain
// identifier (its index name fits in MySQL's 64 bytes, where index names
// are per table).
const MaxInboxTableName = 63

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckTable checks a table name, optionally schema-qualified
// ("events.outbox"): each part must be a plain identifier, so it can be
// spliced into SQL without quoting; the schema at most 63 bytes and the
// table at most maxBase ([MaxOutboxTableName] for an outbox table,
// [MaxInboxTableName] for an inbox table). The error wraps
// [ErrInvalidTable].
func CheckTable(name string, maxBase int) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w: %q has more than one dot", ErrInvalidTable, name)
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			return fmt.Errorf("%w: %q: each part must match %s", ErrInvalidTable, name, identRE)
		}
	}
	if len(parts) == 2 && len(parts[0]) > 63 {
		return fmt.Errorf("%w: %q: the schema name is %d bytes, more than 63", ErrInvalidTable, name, len(parts[0]))
	}
	if base := parts[len(parts)-1]; len(base) > maxBase {
		if maxBase == MaxOutboxTableName {
			return fmt.Errorf("%w: %q: the table name is %d bytes; at most %d, so that the names derived from it (%s_pending_shard, ...) fit in 63",
				ErrInvalidTable, name, len(base), maxBase, base)
		}
		return fmt.Errorf("%w: %q: the table name is %d bytes, more than %d", ErrInvalidTable, name, len(base), maxBase)
	}
	return nil
}

// baseName is the unqualified table name, used to name indexes, sequences
// and the NOTIFY channel.
func baseName(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}

// qualify prefixes name with table's schema, if any.
func qualify(table, name string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[:i+1] + name
	}
	return name
}

// leasesTable and relaysTable name the tables that divide the shards among
// relays.
func leasesTable(table string) string { return qualify(table, baseName(table)+"_leases") }
func relaysTable(table string) string { return qualify(table, baseName(table)+"_relays") }

// QueueTable names the queue of the pending rows of a plain PostgreSQL
// outbox table (see "The queue" in the package documentation):
// <table>_queue, in the table's schema. Its qid column is the id of a
// pending row.
func QueueTable(table string) string { return queueTable(table) }

// queueTable is QueueTable, and queueFunc names the function of the
// queue's trigger (see queueDDL).
func queueTable(table string) string { return qualify(table, baseName(table)+"_queue") }
func queueFunc(table string) string  { return qualify(table, baseName(table)+"_enqueue") }

// waitersTable names the table of relays waiting for a notification of
// earlier versions (replaced by wakeSequence; left in place, unused).
// (PostgreSQL only: see [Store.RequestWake]).
func waitersTable(table string) string { return qualify(table, baseName(table)+"_waiters") }

// wakeSequence names the sequence that holds, on PostgreSQL, the time until
// which some relay waits for a notification (see Store.RequestWake).
func wakeSequence(table string) string { return qualify(table, baseName(table)+"_wake") }

// aggregateHash is the 32-bit FNV-1a hash of an aggregate, the source of its
// shard and of its write lock key.
func aggregateHash(aggType, aggID string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(aggType))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(aggID))
	return h.Sum32()
}

// ShardOf returns the shard of an aggregate, which every outbox row stores:
// the FNV-1a hash of the aggregate type, a zero byte and the aggregate id,
// modulo [Shards]. Code that writes outbox rows without a [Writer] (a
// migration, another language) must store the same value.
func ShardOf(aggType, aggID string) int16 {
	return int16(aggregateHash(aggType, aggID) % Shards)
}

// seedLeases is the statement that creates one lease row per shard.
func seedLeases(table, conflict string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + leasesTable(table) + " (shard) VALUES ")
	for i := range Shards {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + strconv.Itoa(i) + ")")
	}
	b.WriteString(" " + conflict)
	return b.String()
}

// OutboxDDL returns the statements that create the outbox table, its
// indexes, the two small tables relays share it through (leases per shard,
// relays alive) and, for PostgreSQL, the wake-up register (for MySQL, the
// commit-order lock table), for users who run their own migrations. The
// statements bring a table created by an earlier version up to date, and
// are idempotent but for one on MySQL/MariaDB: the ALTER TABLE ... ADD
// COLUMN session_lock of the relays table fails with error 1060 (duplicate
// column) once applied, which [Migrate] ignores; a migration tool
// runs it once. An empty table means [DefaultTable]. It returns an
// error wrapping [ErrInvalidTable] or [ErrUnsupportedDialect].
func OutboxDDL(d Dialect, table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := CheckTable(table, MaxOutboxTableName); err != nil {
		return nil, err
	}
	impl, err := sqlOf(d)
	if err != nil {
		return nil, err
	}
	return impl.ddl(table), nil
}

// migrateOutbox creates the outbox table, its indexes, its lease tables
// and (PostgreSQL) its wake-up register if they do not exist, in one
// transaction (on MySQL and MariaDB, whose DDL commits implicitly, the
// statements are idempotent instead). Concurrent runs on PostgreSQL are
// serialised by an advisory lock. It is safe to run on every start. An
// empty d means [DialectOf] db; an empty table means [DefaultTable].
func migrateOutbox(ctx context.Context, db DB, d Dialect, table string) error {
	if nilDB(db) {
		return errNilDB
	}
	if d == "" {
		var err error
		if d, err = db.Dialect(); err != nil {
			return err
		}
	}
	if _, err := OutboxDDL(d, table); err != nil {
		return err // before opening a transaction
	}
	return inTx(ctx, db, func(tx Tx) error { return MigrateOutboxTx(ctx, tx, d, table) })
}

// MigrateOutboxTx is [Migrate] in the caller's transaction tx (a
// Tx, or a GORM transaction's connection pool), for migration tools
// that run each step in a transaction of their own; d must be set.
func MigrateOutboxTx(ctx context.Context, tx Executor, d Dialect, table string) error {
	if table == "" {
		table = DefaultTable
	}
	stmts, err := OutboxDDL(d, table)
	if err != nil {
		return err
	}
	impl, _ := sqlOf(d)
	if l := impl.migrateLock(table); l != "" {
		stmts = append([]string{l}, stmts...)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil && !ignorableDDLError(s, err) {
			return fmt.Errorf("sqlstore: migrate outbox table: %w", err)
		}
	}
	return nil
}

// inTx runs fn in a transaction on db, and commits it when fn succeeds.
func inTx(ctx context.Context, db DB, fn func(Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sqlstore: migrate: commit: %w", err)
	}
	return nil
}
