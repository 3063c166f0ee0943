package hooks_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks"
)

// BenchmarkCreateSQLite measures the plugin's own CPU cost on a Create of
// one order with one event, in GORM's implicit transaction and inside
// db.Transaction, on SQLite without fsync, where the database's share is
// smallest.
//
//	go test -run '^$' -bench CreateSQLite -benchmem ./internal/coretest/hooks/
func BenchmarkCreateSQLite(b *testing.B) {
	for _, inTx := range []bool{false, true} {
		name := "implicit"
		if inTx {
			name = "Transaction"
		}
		b.Run(name, func(b *testing.B) {
			// synchronous=OFF: no fsync, so the plugin's CPU cost shows.
			db, err := gorm.Open(sqlite.Open("file:"+filepath.Join(b.TempDir(), "bench.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)"), &gorm.Config{Logger: logger.Discard})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if sqlDB, err := db.DB(); err == nil {
					sqlDB.Close()
				}
			})
			if err := hooks.Migrate(context.Background(), db, ""); err != nil {
				b.Fatal(err)
			}
			if err := db.AutoMigrate(&Order{}); err != nil {
				b.Fatal(err)
			}
			p, err := hooks.New(hooks.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if err := db.Use(p); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				o := &Order{}
				o.Place(9.5)
				var err error
				if inTx {
					err = db.Transaction(func(tx *gorm.DB) error { return tx.Create(o).Error })
				} else {
					err = db.Create(o).Error
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
