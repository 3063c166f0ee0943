package sqlstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/gooutbox/outbox/internal/testhooks"
)

// TestMySQLErrorNumber: MySQL's errors are known by their type's package
// path and name, wrapped or joined, without importing the driver outside
// tests.
func TestMySQLErrorNumber(t *testing.T) {
	dup := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	for _, err := range []error{
		dup,
		fmt.Errorf("insert: %w", dup),
		errors.Join(errors.New("other"), fmt.Errorf("tx: %w", dup)),
	} {
		if n, ok := testhooks.Sqlstore.MySQLErrorNumber(err); !ok || n != 1062 {
			t.Errorf("mysqlErrorNumber(%v) = %d, %v; want 1062, true", err, n, ok)
		}
		if !testhooks.Sqlstore.IsDuplicateKey(err) {
			t.Errorf("isDuplicateKey(%v) = false", err)
		}
	}
	if !testhooks.Sqlstore.Transient(fmt.Errorf("mark: %w", &mysql.MySQLError{Number: 1213})) {
		t.Error("a wrapped ER_LOCK_DEADLOCK is not transient")
	}
	for _, err := range []error{nil, errors.New("Error 1062: Duplicate entry"), &mysql.MySQLError{Number: 1045}} {
		if testhooks.Sqlstore.IsDuplicateKey(err) {
			t.Errorf("isDuplicateKey(%v) = true", err)
		}
	}
}
