package hooks

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// Migrate creates the outbox table, its indexes, its lease tables and
// (PostgreSQL) its NOTIFY trigger if they do not exist, in one transaction,
// on db's connection pool in db's dialect: [sqlstore.MigrateOutbox] for a
// GORM database. It is safe to run on every start. An empty table means
// [sqlstore.DefaultTable].
func Migrate(ctx context.Context, db *gorm.DB, table string) error {
	d, err := sqlstore.ParseDialect(db.Dialector.Name())
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("hooks: migrate outbox table: %w", err)
	}
	return sqlstore.MigrateOutbox(ctx, sqlDB, d, table)
}
