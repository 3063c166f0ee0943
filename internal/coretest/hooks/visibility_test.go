package hooks_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
)

// plugged opens a database of the named kind with gcfg, migrates the test
// models and registers a plugin whose AfterCommit calls are counted.
func plugged(t *testing.T, name string, gcfg *gorm.Config) (*gorm.DB, *atomic.Int32) {
	t.Helper()
	var db *gorm.DB
	if name == "sqlite" {
		db = hookstest.SQLite(t, gcfg)
	} else {
		db = hookstest.Postgres(t, gcfg)
	}
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if err := db.AutoMigrate(&Order{}, &Shop{}, &Ticket{}); err != nil {
		t.Fatalf("AutoMigrate: %v", err)
	}
	var commits atomic.Int32
	p, err := hooks.New(hooks.Config{AfterCommit: func() { commits.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	return db, &commits
}

// TestCommitVisibility: every commit that wrote events clears exactly those
// events from their recorders and calls AfterCommit once; every rollback,
// including a savepoint rolled back inside a committed transaction, keeps
// them pending. Before the fix, application transactions (db.Transaction,
// db.Begin) were invisible: their events stayed pending and AfterCommit was
// not called.
func TestCommitVisibility(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, db *gorm.DB, commits *atomic.Int32)
	boom := errors.New("boom")
	cases := map[string]check{
		"Transaction commits": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			o := &Order{}
			o.Place(1)
			if err := db.Transaction(func(tx *gorm.DB) error { return tx.Save(o).Error }); err != nil {
				t.Fatal(err)
			}
			wantPending(t, "after db.Transaction committed", len(o.Events()), 0)
			wantCommits(t, commits, 1)
		},
		"Transaction rolls back": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			o := &Order{}
			o.Place(1)
			if err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Save(o).Error; err != nil {
					return err
				}
				return boom
			}); !errors.Is(err, boom) {
				t.Fatal(err)
			}
			wantPending(t, "after db.Transaction rolled back", len(o.Events()), 1)
			wantCommits(t, commits, 0)
			o.ID = 0
			if err := db.Transaction(func(tx *gorm.DB) error { return tx.Create(o).Error }); err != nil {
				t.Fatal(err)
			}
			wantPending(t, "after the retry committed", len(o.Events()), 0)
			wantCommits(t, commits, 1)
			wantRows(t, db, 1)
		},
		"Begin Commit": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			o := &Order{}
			o.Place(1)
			tx := db.Begin()
			if err := tx.Create(o).Error; err != nil {
				t.Fatal(err)
			}
			o.Pay("card")
			if err := tx.Save(o).Error; err != nil {
				t.Fatal(err)
			}
			wantPending(t, "before Commit", len(o.Events()), 2)
			if err := tx.Commit().Error; err != nil {
				t.Fatal(err)
			}
			wantPending(t, "after Commit", len(o.Events()), 0)
			wantCommits(t, commits, 1)
		},
		"Begin Rollback": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			o := &Order{}
			o.Place(1)
			tx := db.Begin()
			if err := tx.Create(o).Error; err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback().Error; err != nil {
				t.Fatal(err)
			}
			wantPending(t, "after Rollback", len(o.Events()), 1)
			wantCommits(t, commits, 0)
		},
		"savepoint rolled back in a committed transaction": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			outer, inner, kept := &Order{}, &Order{}, &Order{}
			outer.Place(1)
			inner.Place(2)
			kept.Place(3)
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(outer).Error; err != nil {
					return err
				}
				if err := tx.Transaction(func(tx2 *gorm.DB) error {
					return tx2.Create(kept).Error
				}); err != nil {
					return err
				}
				if err := tx.Transaction(func(tx2 *gorm.DB) error {
					if err := tx2.Create(inner).Error; err != nil {
						return err
					}
					return boom
				}); !errors.Is(err, boom) {
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wantPending(t, "outer", len(outer.Events()), 0)
			wantPending(t, "committed savepoint", len(kept.Events()), 0)
			wantPending(t, "rolled-back savepoint", len(inner.Events()), 1)
			wantCommits(t, commits, 1)
			wantRows(t, db, 2)
		},
		"savepoint rolled back then saved again": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			o := &Order{}
			o.Place(1)
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(o).Error; err != nil {
					return err
				}
				_ = tx.Transaction(func(tx2 *gorm.DB) error {
					o.Pay("card")
					if err := tx2.Save(o).Error; err != nil {
						return err
					}
					return boom
				})
				return tx.Save(o).Error
			})
			if err != nil {
				t.Fatal(err)
			}
			wantPending(t, "after commit", len(o.Events()), 0)
			wantCommits(t, commits, 1)
			wantRows(t, db, 2)
		},
		"explicit SavePoint RollbackTo and raw RELEASE": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			a, b, c := &Order{}, &Order{}, &Order{}
			a.Place(1)
			b.Place(2)
			c.Place(3)
			tx := db.Begin()
			must(t, tx.Create(a).Error)
			must(t, tx.SavePoint("sp_a").Error)
			must(t, tx.Create(b).Error)
			must(t, tx.RollbackTo("sp_a").Error)
			must(t, tx.Exec("SAVEPOINT sp_c").Error)
			must(t, tx.Create(c).Error)
			must(t, tx.Exec("RELEASE SAVEPOINT sp_c").Error)
			must(t, tx.Commit().Error)
			// Under PrepareStmt the raw SAVEPOINT and RELEASE run as prepared
			// statements the plugin cannot follow: it keeps the events
			// pending (a later save confirms them) rather than guess.
			confirmed := 0
			if db.PrepareStmt {
				confirmed = 1
			}
			wantPending(t, "before the savepoint", len(a.Events()), confirmed)
			wantPending(t, "rolled back to the savepoint", len(b.Events()), 1)
			wantPending(t, "in a released savepoint", len(c.Events()), confirmed)
			wantCommits(t, commits, 1)
			wantRows(t, db, 2)
		},
		"WithContext and Session": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			o, o2 := &Order{}, &Order{}
			o.Place(1)
			o2.Place(2)
			sess := db.WithContext(context.Background()).Session(&gorm.Session{})
			if err := sess.Transaction(func(tx *gorm.DB) error {
				return tx.WithContext(context.Background()).Create(o).Error
			}); err != nil {
				t.Fatal(err)
			}
			if err := db.Session(&gorm.Session{SkipDefaultTransaction: true}).Create(o2).Error; err != nil {
				t.Fatal(err)
			}
			wantPending(t, "o", len(o.Events()), 0)
			wantPending(t, "o2", len(o2.Events()), 0)
			wantCommits(t, commits, 2)
		},
		"associations in a transaction": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			shop := &Shop{Name: "corner", Tickets: make([]Ticket, 2)}
			shop.Record(ShopOpened{EventVersion: 1, OccurredAt: now()})
			for i := range shop.Tickets {
				shop.Tickets[i].Record(OrderPlaced{EventVersion: 1, OccurredAt: now()})
			}
			if err := db.Transaction(func(tx *gorm.DB) error { return tx.Create(shop).Error }); err != nil {
				t.Fatal(err)
			}
			n := len(shop.Events()) + len(shop.Tickets[0].Events()) + len(shop.Tickets[1].Events())
			wantPending(t, "shop and tickets", n, 0)
			wantCommits(t, commits, 1)
		},
		"CreateInBatches": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			orders := []*Order{{}, {}, {}}
			for _, o := range orders {
				o.Place(1)
			}
			if err := db.CreateInBatches(orders, 2).Error; err != nil {
				t.Fatal(err)
			}
			for _, o := range orders {
				wantPending(t, "order", len(o.Events()), 0)
			}
			wantCommits(t, commits, 1)
		},
		"raw savepoint statements": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			// Under PrepareStmt GORM runs raw SQL as prepared statements, out
			// of the plugin's precise sight: the events must stay pending
			// rather than be confirmed though rolled back.
			a, b := &Order{}, &Order{}
			a.Place(1)
			b.Place(2)
			tx := db.Begin()
			must(t, tx.Exec("SAVEPOINT raw_sp").Error)
			must(t, tx.Create(a).Error)
			must(t, tx.Exec("ROLLBACK TO SAVEPOINT raw_sp").Error)
			must(t, tx.Commit().Error)
			wantPending(t, "rolled back to a raw savepoint", len(a.Events()), 1)
			wantRows(t, db, 0)
			commits.Store(0)
			// A later save writes the event and confirms it.
			a.ID = 0
			must(t, db.Create(a).Error)
			wantPending(t, "after the retry", len(a.Events()), 0)
			wantRows(t, db, 1)

			tx = db.Begin()
			must(t, tx.Create(b).Error)
			must(t, tx.Exec("ROLLBACK").Error) // the whole transaction, behind GORM's back
			_ = tx.Commit()
			wantPending(t, "after a raw ROLLBACK", len(b.Events()), 1)
			wantRows(t, db, 1)
		},
		"PrepareStmt session and Enqueue": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			p := db.Config.Plugins["outbox"].(*hooks.Plugin)
			o := &Order{}
			o.Place(1)
			must(t, db.Session(&gorm.Session{PrepareStmt: true}).Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(o).Error; err != nil {
					return err
				}
				_, err := p.Enqueue(tx, "billing_run", "2026-11", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "m"})
				return err
			}))
			wantPending(t, "PrepareStmt session", len(o.Events()), 0)
			wantCommits(t, commits, 1)
			must(t, db.Transaction(func(tx *gorm.DB) error {
				_, err := p.Enqueue(tx, "billing_run", "2026-12", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "m"})
				return err
			}))
			wantCommits(t, commits, 1)
			if _, err := p.Enqueue(db, "billing_run", "2027-01", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "m"}); err != nil {
				t.Fatal(err)
			}
			wantCommits(t, commits, 1) // a statement of its own: committed at once
			wantRows(t, db, 4)
		},
		"db.Connection is not followed but loses nothing": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			// db.Connection runs on a *sql.Conn the plugin did not wrap: the
			// commit is not seen, so the event stays pending, and the next
			// save finds its committed row and drops it.
			o := &Order{}
			o.Place(1)
			must(t, db.Connection(func(c *gorm.DB) error {
				return c.Transaction(func(tx *gorm.DB) error { return tx.Create(o).Error })
			}))
			wantPending(t, "after a transaction on db.Connection", len(o.Events()), 1)
			wantRows(t, db, 1)
			commits.Store(0)
			must(t, db.Save(o).Error)
			wantPending(t, "after the next save", len(o.Events()), 0)
			wantRows(t, db, 1)
		},
		"DB still reaches the sql.DB": func(t *testing.T, db *gorm.DB, commits *atomic.Int32) {
			sqlDB, err := db.DB()
			if err != nil || sqlDB.Ping() != nil {
				t.Fatalf("db.DB() = %v, %v", sqlDB, err)
			}
			must(t, db.Transaction(func(tx *gorm.DB) error {
				inTx, err := tx.DB()
				if err != nil || inTx != sqlDB {
					t.Errorf("tx.DB() = %p, %v; want %p", inTx, err, sqlDB)
				}
				return nil
			}))
		},
	}
	for _, prepare := range []bool{false, true} {
		for _, name := range []string{"sqlite", "postgres"} {
			for cname, fn := range cases {
				mode := "/"
				if prepare {
					mode = "/PrepareStmt/"
				}
				t.Run(name+mode+cname, func(t *testing.T) {
					t.Parallel()
					db, commits := plugged(t, name, &gorm.Config{PrepareStmt: prepare})
					fn(t, db, commits)
				})
			}
		}
	}
}

func wantPending(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: pending events = %d, want %d", what, got, want)
	}
}

func wantCommits(t *testing.T, commits *atomic.Int32, want int32) {
	t.Helper()
	if got := commits.Swap(0); got != want {
		t.Errorf("AfterCommit calls = %d, want %d", got, want)
	}
}

func wantRows(t *testing.T, db *gorm.DB, want int64) {
	t.Helper()
	if n := count(t, db, "outbox_messages"); n != want {
		t.Errorf("outbox rows = %d, want %d", n, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
