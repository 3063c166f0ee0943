package hooks

import (
	"context"
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
// sqlstore.Writer or sqlstore.Inbox beside GORM's own writes, and whose
// UnwrapTx turns a transaction the driver began into a GORM session on it,
// for handlers that take a *gorm.DB (runtime/consumer's Handle).
type Driver struct {
	*databasesql.DB
	gdb *gorm.DB // the sessions of UnwrapTx derive from it
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
	return &Driver{DB: databasesql.NewWithDialect(sqlDB, d), gdb: db}, nil
}

// UnwrapExecutor implements sqlstore.Driver: statements run on tx's
// connection pool (its transaction, inside db.Transaction).
func (d *Driver) UnwrapExecutor(tx *gorm.DB) sqlstore.Executor {
	return databasesql.Executor(tx.Statement.ConnPool)
}

// UnwrapTx implements sqlstore.Driver: a GORM session of the driver's
// *gorm.DB whose statements run in tx, a transaction the driver (or one of
// its Conns) began, under ctx, as the tx of gorm.DB.Transaction after its
// BeginTx is (a fresh statement whose connection pool is the *sql.Tx). For
// a tx of another driver it returns nil. The session must neither commit
// nor roll back: the one who began tx does.
func (d *Driver) UnwrapTx(ctx context.Context, tx sqlstore.Tx) *gorm.DB {
	sqlTx := d.DB.UnwrapTx(ctx, tx)
	if sqlTx == nil {
		return nil
	}
	s := d.gdb.Session(&gorm.Session{NewDB: true, Context: ctx})
	s.Statement.ConnPool = sqlTx
	return s
}

var _ sqlstore.Driver[*gorm.DB] = (*Driver)(nil)
