package sqlstore_test

import (
	"context"
	"testing"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// TestSQLStoreMySQL: a relay without GORM runs OutboxDDL's statements
// itself and opens the store on a plain *sql.DB of the "mysql" driver,
// whose dialect the store detects; the statements are idempotent.
func TestSQLStoreMySQL(t *testing.T) {
	db := openSQL(t, sqlstore.MySQL)
	stmts, err := sqlstore.OutboxDDL(sqlstore.MySQL, "")
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
	s, err := sqlstore.NewStore(db, sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.Claim(ctx, relay.ClaimRequest{Owner: "a", Limit: 10})
	if err != nil || len(b.Messages) != 0 {
		t.Fatalf("Claim = %d messages, %v; want none", len(b.Messages), err)
	}
	var held int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_messages_leases WHERE owner = 'a'`).Scan(&held); err != nil || held != sqlstore.Shards {
		t.Errorf("shards held by the only relay = %d, %v; want %d", held, err, sqlstore.Shards)
	}
}
