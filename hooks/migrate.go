package hooks

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// Migrate creates the outbox table, its indexes, its lease tables and
// (PostgreSQL) its wake-up register if they do not exist, in one GORM
// transaction of db (a savepoint when db is a transaction already, as a
// migration tool's step is), in db's dialect: [sqlstore.MigrateOutboxTx]
// for a GORM database. It is safe to run on every start. An empty table
// means [sqlstore.DefaultTable]. A nil db is an error wrapping
// [sqlstore.ErrInvalidConfig].
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	if db == nil || db.Dialector == nil {
		return fmt.Errorf("hooks: migrate: %w: nil *gorm.DB", sqlstore.ErrInvalidConfig)
	}
	d, err := sqlstore.ParseDialect(db.Dialector.Name())
	if err != nil {
		return err
	}
	if _, err := sqlstore.OutboxDDL(d, table); err != nil {
		return err // before opening a transaction
	}
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return sqlstore.MigrateOutboxTx(ctx, databasesql.Executor(tx.Statement.ConnPool), d, table)
	})
}
