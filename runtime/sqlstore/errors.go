package sqlstore

import (
	"errors"
	"fmt"
	"reflect"
)

// ErrInvalidTable is wrapped by the errors of [CheckTable] and of every
// function and constructor that takes a table name, when the name is not a
// plain SQL identifier (optionally schema-qualified) within its length
// limit.
var ErrInvalidTable = errors.New("sqlstore: invalid table name")

// ErrInvalidConfig is wrapped by the errors of [StoreConfig.Validate],
// [PartitionConfig.Validate], [NewStore], [NewRetention] and the functions
// that take a DB, for a configuration they reject (a negative
// duration, a nil database, ...). The error text names the field.
var ErrInvalidConfig = errors.New("sqlstore: invalid config")

// errNilDB is the error of a function given a nil database (a nil DB, or
// a nil *sql.DB).
var errNilDB = fmt.Errorf("%w: nil database", ErrInvalidConfig)

// ErrUnsupportedDialect is wrapped by the errors of [ParseDialect],
// [DialectOf] and every function and constructor that takes a dialect, for
// a database the storage layer has no SQL for.
var ErrUnsupportedDialect = errors.New("sqlstore: unsupported database dialect")

// nilDB reports whether db is nil, or a driver wrapping nothing (a nil
// pointer: databasesql.New(nil) is one).
func nilDB(db DB) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
