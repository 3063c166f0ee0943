package sqlstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// DefaultTable is the outbox table used when a Config leaves Table empty.
const DefaultTable = "outbox_messages"

// Shards is the number of shards the outbox's aggregates are hashed into.
// Each row stores its shard; relays sharing a table divide the shards between
// them with leases (see [Store]), so one aggregate is only ever published by
// one relay at a time. It is part of the table's format: every writer and
// relay of a table must agree on it.
const Shards = 64

// maxBaseName is the longest unqualified table name: the longest name the
// schema derives from it (base + "_blocked_aggregate" and the like) must fit
// in PostgreSQL's 63-byte identifiers, or PostgreSQL would silently truncate
// it and two indexes could collide.
const maxBaseName = 63 - len("_pending_shard")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validTable checks a table name, optionally schema-qualified
// ("events.outbox"): each part must be a plain identifier, so it can be
// spliced into SQL without quoting; the schema at most 63 bytes and the
// table at most 49, so that every index, table and trigger name derived
// from it fits in 63 bytes.
func validTable(name string) error {
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
	if base := parts[len(parts)-1]; len(base) > maxBaseName {
		return fmt.Errorf("%w: %q: the table name is %d bytes; at most %d, so that the names derived from it (%s_pending_shard, ...) fit in 63",
			ErrInvalidTable, name, len(base), maxBaseName, base)
	}
	return nil
}

// baseName is the unqualified table name, used to name indexes, functions,
// triggers and the NOTIFY channel.
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
// modulo [Shards]. Code that writes outbox rows without the plugin (a
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

// DDL returns the statements that create the outbox table, its indexes, the
// two small tables relays share it through (leases per shard, relays alive)
// and, for PostgreSQL, the NOTIFY trigger (for MySQL, the commit-order lock
// table), for dialect ("postgres", "sqlite" or "mysql"), for users who run
// their own migrations. The statements are
// idempotent, and bring a table created by an earlier version up to date.
// An empty table means [DefaultTable].
func DDL(dialect, table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return nil, err
	}
	d, err := dialectOf(dialect)
	if err != nil || d.name() != dialect {
		return nil, fmt.Errorf("%w: %q (supported: postgres, sqlite, mysql)", ErrUnsupportedDialect, dialect)
	}
	return d.ddl(table), nil
}

// Migrate creates the outbox table, its indexes, its lease tables and
// (PostgreSQL) its NOTIFY trigger if they do not exist, in one transaction.
// It is safe to run on every start. An empty table means [DefaultTable].
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	stmts, err := DDL(db.Dialector.Name(), table)
	if err != nil {
		return err
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		d, _ := dialectOf(db.Dialector.Name())
		if lock := d.migrateLock(table); lock != "" {
			if err := tx.Exec(lock).Error; err != nil {
				return fmt.Errorf("sqlstore: migrate outbox table: %w", err)
			}
		}
		for _, s := range stmts {
			if err := tx.Exec(s).Error; err != nil {
				return fmt.Errorf("sqlstore: migrate outbox table: %w", err)
			}
		}
		return nil
	})
}
