package sqlstore

import "errors"

// ErrInvalidTable is wrapped by the errors of [CheckTable] and of every
// function and constructor that takes a table name, when the name is not a
// plain SQL identifier (optionally schema-qualified) within its length
// limit.
var ErrInvalidTable = errors.New("sqlstore: invalid table name")

// ErrUnsupportedDialect is wrapped by the errors of [ParseDialect],
// [DialectOf] and every function and constructor that takes a dialect, for
// a database the storage layer has no SQL for.
var ErrUnsupportedDialect = errors.New("sqlstore: unsupported database dialect")
