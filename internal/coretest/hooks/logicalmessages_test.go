package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime/runtimetest"
)

// TestLogicalMessages: with Config.LogicalMessages the plugin writes a
// committed save's events as transactional logical decoding messages with
// the prefix (what the CDC relay's messages mode reads), no outbox row,
// and nothing for a save that rolled back. A temporary test_decoding slot
// reads the log back.
func TestLogicalMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := hookstest.Postgres(t, nil)
	var level string
	if err := db.Raw(`SHOW wal_level`).Scan(&level).Error; err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		runtimetest.Unavailable(t, "PostgreSQL with wal_level = logical (.ci/run sets it)", "127.0.0.1:5432", "OUTBOX_TEST_POSTGRES_DSN", fmt.Errorf("wal_level is %q", level))
	}
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	p, err := hooks.New(hooks.Config{LogicalMessages: "gooutbox_test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	// One connection: the temporary slot lives as long as its session.
	conn, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := conn.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	slot := "hooks_test_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := sc.ExecContext(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)`, slot); err != nil {
		t.Fatal(err)
	}

	kept := &Order{}
	kept.Place(3)
	if err := db.Create(kept).Error; err != nil {
		t.Fatal(err)
	}
	gone := &Order{}
	gone.Place(4)
	errRollback := errors.New("roll back")
	if err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(gone).Error; err != nil {
			return err
		}
		return errRollback
	}); !errors.Is(err, errRollback) {
		t.Fatal(err)
	}

	var rows int64
	if err := db.Table("outbox_messages").Count(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d outbox rows with LogicalMessages, want none", rows)
	}
	res, err := sc.QueryContext(ctx, `SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL) WHERE data LIKE 'message:%'`, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	var msgs []string
	for res.Next() {
		var d string
		if err := res.Scan(&d); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, d)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0], "transactional: 1 prefix: gooutbox_test") ||
		!strings.Contains(msgs[0], `"event_type":"orders.order_placed"`) || !strings.Contains(msgs[0], `"aggregate_id":"1"`) {
		t.Fatalf("logical decoding messages %q, want one, transactional, of the committed save's event (aggregate 1)", msgs)
	}
}
