package sqlstore_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/relay"
)

// TestSQLStoreMySQL: a relay without GORM runs DDL's statements itself and
// opens the store on a plain *sql.DB with the "mysql" driver name; the
// statements are idempotent.
func TestSQLStoreMySQL(t *testing.T) {
	db, err := sql.Open("mysql", hookstest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stmts, err := hooks.DDL("mysql", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	s, err := hooks.NewSQLStore(db, "mysql", hooks.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "a", Limit: 10})
	if err != nil || len(b.Messages) != 0 {
		t.Fatalf("Claim = %d messages, %v; want none", len(b.Messages), err)
	}
	var held int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_messages_leases WHERE owner = 'a'`).Scan(&held); err != nil || held != hooks.Shards {
		t.Errorf("shards held by the only relay = %d, %v; want %d", held, err, hooks.Shards)
	}
}
