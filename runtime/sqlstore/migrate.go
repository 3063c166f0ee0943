package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Schema is the set of tables one service needs: the outbox (a service
// that writes events), the inbox (one that consumes them), or both. It is
// the one way to create them: [Migrate] runs it against a database, and
// [Schema.DDL] and [Schema.DropDDL] print it for a team that keeps its
// schema in its own migration tool (goose, golang-migrate, Atlas, ...;
// `outbox migrate --print` and `--out` write those files).
type Schema struct {
	// Dialect is the database's. Migrate reads it from the driver when it
	// is empty; DDL and DropDDL need it.
	Dialect Dialect
	// Outbox creates the outbox table, its indexes, its lease tables and
	// (PostgreSQL) its wake-up register.
	Outbox bool
	// OutboxTable is the outbox table, optionally schema-qualified.
	// Default: [DefaultTable].
	OutboxTable string
	// Partitioned, on PostgreSQL, creates a new outbox table partitioned by
	// event time, one partition per Interval; an existing table that
	// is not partitioned is an error wrapping [ErrNotPartitioned]. Its
	// partitions are created at run time, so DDL refuses it. Default: nil,
	// a plain table.
	Partitioned *PartitionConfig
	// Inbox creates the consumers' inbox table.
	Inbox bool
	// InboxTable is the inbox table, optionally schema-qualified.
	// Default: [InboxDefaultTable].
	InboxTable string
	// DeadLetters creates the consumers' dead-letter table (see
	// [DeadLetters]).
	DeadLetters bool
	// DeadLetterTable is the dead-letter table, optionally
	// schema-qualified. Default: [DeadLetterDefaultTable].
	DeadLetterTable string
}

// errEmptySchema is the error of a Schema that names no table.
var errEmptySchema = fmt.Errorf("%w: the schema names no table (set Outbox, Inbox or DeadLetters)", ErrInvalidConfig)

// empty reports whether s names no table.
func (s Schema) empty() bool { return !s.Outbox && !s.Inbox && !s.DeadLetters }

// Migrate creates the tables of s in db if they do not exist. The outbox:
// the table, its indexes, its lease tables and (PostgreSQL) its wake-up
// register, in one transaction (on MySQL and MariaDB, whose DDL commits
// implicitly, the statements are idempotent instead; concurrent runs on
// PostgreSQL are serialised by an advisory lock), or with s.Partitioned a
// table partitioned by time (see "Partitioned outbox" in the package
// documentation: on an existing table that is not partitioned it changes
// nothing and returns an error wrapping [ErrNotPartitioned]). The inbox
// and the dead-letter table: each table and its index. It is safe to run on every start. In a transaction
// of the caller's (a migration tool's step, GORM's), use [MigrateOutboxTx]
// and [MigrateInboxTx].
func Migrate(ctx context.Context, db DB, s Schema) error {
	if nilDB(db) {
		return errNilDB
	}
	if s.empty() {
		return errEmptySchema
	}
	d := s.Dialect
	if d == "" {
		var err error
		if d, err = db.Dialect(); err != nil {
			return err
		}
	}
	if s.Outbox {
		var err error
		if s.Partitioned != nil {
			if d != Postgres {
				return fmt.Errorf("%w: a partitioned outbox is PostgreSQL only (the database is %s)", ErrInvalidConfig, d)
			}
			err = migratePartitionedOutbox(ctx, db, s.OutboxTable, *s.Partitioned)
		} else {
			err = migrateOutbox(ctx, db, d, s.OutboxTable)
		}
		if err != nil {
			return err
		}
	}
	if s.Inbox {
		if err := migrateInbox(ctx, db, d, s.InboxTable); err != nil {
			return err
		}
	}
	if s.DeadLetters {
		stmts, err := DeadLetterDDL(d, s.DeadLetterTable)
		if err != nil {
			return err
		}
		return inTx(ctx, db, func(tx Tx) error {
			for _, stmt := range stmts {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("sqlstore: migrate dead-letter table: %w", err)
				}
			}
			return nil
		})
	}
	return nil
}

// DDL returns the statements that create s's tables, in order, each safe
// to run again (on MySQL and MariaDB, the one ALTER TABLE ... ADD COLUMN is
// not: see [OutboxDDL]). A partitioned outbox is an error wrapping
// [ErrInvalidConfig]: use [Migrate].
func (s Schema) DDL() ([]string, error) {
	if s.empty() {
		return nil, errEmptySchema
	}
	if s.Partitioned != nil {
		return nil, fmt.Errorf("%w: a partitioned outbox's partitions are made at run time: create it with Migrate (outbox migrate --partition-interval), not from printed DDL", ErrInvalidConfig)
	}
	var out []string
	if s.Outbox {
		stmts, err := OutboxDDL(s.Dialect, s.OutboxTable)
		if err != nil {
			return nil, err
		}
		out = append(out, stmts...)
	}
	if s.Inbox {
		stmts, err := InboxDDL(s.Dialect, s.InboxTable)
		if err != nil {
			return nil, err
		}
		out = append(out, stmts...)
	}
	if s.DeadLetters {
		stmts, err := DeadLetterDDL(s.Dialect, s.DeadLetterTable)
		if err != nil {
			return nil, err
		}
		out = append(out, stmts...)
	}
	return out, nil
}

// DropDDL returns the statements that drop what [Schema.DDL] creates, in
// reverse order: the down migration of a migration tool. They drop the
// tables with their rows.
func (s Schema) DropDDL() ([]string, error) {
	if _, err := s.DDL(); err != nil {
		return nil, err
	}
	var out []string
	if s.Outbox {
		table := s.OutboxTable
		if table == "" {
			table = DefaultTable
		}
		t := tablesOf(table)
		if s.Dialect == Postgres {
			// Reversed below: the table (with its trigger) goes first,
			// then the queue and the trigger's function.
			out = append(out, `DROP FUNCTION IF EXISTS `+qualify(table, baseName(table)+"_lease_guard")+`()`,
				`DROP FUNCTION IF EXISTS `+queueFunc(table)+`()`, `DROP TABLE IF EXISTS `+queueTable(table))
		}
		out = append(out, `DROP TABLE IF EXISTS `+t.table, `DROP TABLE IF EXISTS `+t.leases, `DROP TABLE IF EXISTS `+t.relays)
		switch s.Dialect {
		case Postgres:
			out = append(out, `DROP SEQUENCE IF EXISTS `+t.wake)
		case MySQL:
			out = append(out, `DROP TABLE IF EXISTS `+locksTable(table))
		}
	}
	if s.Inbox {
		table := s.InboxTable
		if table == "" {
			table = InboxDefaultTable
		}
		out = append(out, `DROP TABLE IF EXISTS `+table)
	}
	if s.DeadLetters {
		out = append(out, `DROP TABLE IF EXISTS `+cmp.Or(s.DeadLetterTable, DeadLetterDefaultTable))
	}
	slices.Reverse(out)
	return out, nil
}
