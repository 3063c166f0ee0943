package databasesql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"
)

// fakeDriver opens connections that do nothing.
type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return &fakeConn{}, nil }

type fakeConn struct{}

func (*fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no statements") }
func (*fakeConn) Close() error                        { return nil }
func (*fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("fake: no transactions") }

func init() { sql.Register("databasesql-fake", fakeDriver{}) }

// TestConnSurvivesAConcurrentClose: database/sql may close a connection
// from a goroutine of its own (a transaction whose context ended hands it
// back in the background) while the store asks for its key or discards
// it; neither may panic (Go's Conn.Raw dereferences the driver connection
// a concurrent close took away), and the key stays the connection's.
func TestConnSurvivesAConcurrentClose(t *testing.T) {
	db, err := sql.Open("databasesql-fake", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d := New(db)
	for range 2000 {
		sc, err := d.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c := sc.(*conn)
		key := c.Key()
		if key == nil {
			t.Fatal("a new connection has no key")
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _ = c.c.Close() }()
		go func() {
			defer wg.Done()
			if got := c.Key(); got != key {
				t.Errorf("key changed: %v, want %v", got, key)
			}
			c.Discard()
		}()
		wg.Wait()
	}
}
