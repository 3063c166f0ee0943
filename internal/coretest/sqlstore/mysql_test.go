package sqlstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// TestSQLStoreMySQL: a relay without GORM runs OutboxDDL's statements
// itself and opens the store on a plain *sql.DB of the "mysql" driver,
// whose dialect the store detects; the statements are idempotent.
func TestSQLStoreMySQL(t *testing.T) {
	t.Parallel()
	db := openSQL(t, sqlstore.MySQL)
	stmts, err := sqlstore.OutboxDDL(sqlstore.MySQL, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for pass := range 2 {
		for _, s := range stmts {
			_, err := db.ExecContext(ctx, s)
			var my *mysql.MySQLError
			if pass == 1 && strings.Contains(s, " ADD COLUMN session_lock ") && errors.As(err, &my) && my.Number == 1060 {
				continue // the one statement that is not idempotent (see OutboxDDL)
			}
			if err != nil {
				t.Fatalf("pass %d: %s: %v", pass+1, s, err)
			}
		}
	}
	s, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
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
