package hooks

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// Driver is a GORM database as the storage layer's driver (see
// package runtime/sqlstore): a sqlstore.DB on GORM's connection pool, in
// the dialect of GORM's dialector, for sqlstore.NewStore, the Migrate
// functions and the retention, and a sqlstore.Driver[*gorm.DB] whose
// UnwrapExecutor runs statements in a GORM transaction, for a
// sqlstore.Writer or sqlstore.Inbox beside GORM's own writes.
type Driver struct {
	*databasesql.DB
}

// NewDriver returns the driver of db. A nil db, or one whose pool is not a
// *sql.DB, is an error wrapping sqlstore.ErrInvalidConfig; a dialector
// other than postgres, mysql or sqlite one wrapping
// sqlstore.ErrUnsupportedDialect.
func NewDriver(db *gorm.DB) (*Driver, error) {
	if db == nil || db.Dialector == nil {
		return nil, fmt.Errorf("hooks: driver: %w: nil *gorm.DB", sqlstore.ErrInvalidConfig)
	}
	d, err := sqlstore.ParseDialect(db.Dialector.Name())
	if err != nil {
		return nil, fmt.Errorf("hooks: driver: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("hooks: driver: %w: %w", sqlstore.ErrInvalidConfig, err)
	}
	return &Driver{DB: databasesql.NewWithDialect(sqlDB, d)}, nil
}

// UnwrapExecutor implements sqlstore.Driver: statements run on tx's
// connection pool (its transaction, inside db.Transaction).
func (d *Driver) UnwrapExecutor(tx *gorm.DB) sqlstore.Executor {
	return databasesql.Executor(tx.Statement.ConnPool)
}

var _ sqlstore.Driver[*gorm.DB] = (*Driver)(nil)
