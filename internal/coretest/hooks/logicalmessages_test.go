package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

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
	admin := hookstest.Postgres(t, nil)
	var level string
	if err := admin.Raw(`SHOW wal_level`).Scan(&level).Error; err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		runtimetest.Unavailable(t, "PostgreSQL with wal_level = logical (.ci/run sets it)", "127.0.0.1:5432", "OUTBOX_TEST_POSTGRES_DSN", fmt.Errorf("wal_level is %q", level))
	}
	db := ownDatabase(t, admin)
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
	// Dropped before the session ends, so that the database can be.
	defer sc.ExecContext(ctx, `SELECT pg_drop_replication_slot($1)`, slot)

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

// ownDatabase creates a database of the test's own on admin's server,
// dropped when t ends, and returns a GORM database on it. A logical
// decoding slot decodes every change of its database: in the shared test
// database, the changes of the tests running beside it (a table created or
// dropped while the slot was being made) once failed the decoding with
// "could not map filenode ... to relation OID" (CI, 2026-12-08); the WAL of
// other databases is skipped before it is decoded.
func ownDatabase(t *testing.T, admin *gorm.DB) *gorm.DB {
	t.Helper()
	name := "outbox_test_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if err := admin.Exec(`CREATE DATABASE ` + name).Error; err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := admin.Exec(`DROP DATABASE ` + name + ` WITH (FORCE)`).Error; err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(hookstest.PostgresBaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db, err := gorm.Open(postgres.Open(u.String()), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("open database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}
