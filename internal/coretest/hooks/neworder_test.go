package hooks_test

import (
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
)

// Preset sets its own primary key in a model hook, as an application that
// takes keys from elsewhere (a natural key, a client-side id) does.
type Preset struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	Status string
	runtime.Recorder
}

func (p *Preset) BeforeCreate(*gorm.DB) error {
	p.ID = 4242
	return nil
}

// TestNewAggregatesTakeNoOrderLock: the events of an aggregate that a
// Create inserted with a key the database generated are written without
// the commit-order lock (no other transaction can know that aggregate
// before this one commits, so there is no order to keep), and every other
// write path still takes it: a key set before the INSERT (by the
// application or in BeforeCreate), a natural key, an upsert (which can
// return an existing row), an update, Enqueue. The lock is observed in the
// database, from inside the writing transaction: on PostgreSQL the
// transaction's advisory locks on the outbox table, on MariaDB the rows of
// the lock table (created on first use).
func TestNewAggregatesTakeNoOrderLock(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			db := withPlugin(t, dialect)
			if err := db.AutoMigrate(&Preset{}, &Customer{}); err != nil {
				t.Fatal(err)
			}
			p, err := hooks.New(hooks.Config{})
			if err != nil {
				t.Fatal(err)
			}
			// locks counts the commit-order locks held by tx's transaction
			// (PostgreSQL) or taken so far (MariaDB: slots are created on
			// first use and the test's database is fresh, so each case
			// rolls back to leave none).
			locks := func(tx *gorm.DB) int64 {
				t.Helper()
				var n int64
				q := `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
					AND classid = ((('outbox_messages'::regclass::oid::int8 - 2147483648)::int4)::int8 & 4294967295)::oid`
				if dialect == "mysql" {
					q = `SELECT count(*) FROM outbox_messages_locks`
				}
				if err := tx.Raw(q).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}
			var existing Order
			existing.Place(1)
			if err := db.Create(&existing).Error; err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				name string
				save func(tx *gorm.DB) error
				want int64
			}{
				{"create, key from the database", func(tx *gorm.DB) error {
					var o Order
					o.Place(2)
					return tx.Create(&o).Error
				}, 0},
				{"create of several, keys from the database", func(tx *gorm.DB) error {
					os := make([]Order, 3)
					for i := range os {
						os[i].Place(float64(i))
					}
					return tx.Create(&os).Error
				}, 0},
				{"save of a new model, key from the database", func(tx *gorm.DB) error {
					var o Order
					o.Place(3)
					return tx.Save(&o).Error
				}, 0},
				{"create, key set by the application", func(tx *gorm.DB) error {
					o := Order{ID: 987654}
					o.Place(4)
					return tx.Create(&o).Error
				}, 1},
				{"create, key set in BeforeCreate", func(tx *gorm.DB) error {
					var o Preset
					o.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "preset"})
					return tx.Create(&o).Error
				}, 1},
				{"create, natural key", func(tx *gorm.DB) error {
					c := Customer{Email: "a@example.com"}
					c.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "natural"})
					return tx.Create(&c).Error
				}, 1},
				{"upsert", func(tx *gorm.DB) error {
					var o Order
					o.Place(5)
					// (DO NOTHING on MySQL is ErrAmbiguousWrite: see
					// TestStatementsThatWriteSomeRows.)
					return tx.Clauses(clause.OnConflict{UpdateAll: true}).Create(&o).Error
				}, 1},
				{"update", func(tx *gorm.DB) error {
					o := Order{ID: existing.ID, Status: existing.Status}
					o.Pay("card")
					return tx.Save(&o).Error
				}, 1},
				{"enqueue", func(tx *gorm.DB) error {
					_, err := p.Enqueue(tx, "order", "1", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "enqueue"})
					return err
				}, 1},
			}
			for _, c := range cases {
				tx := db.Begin()
				if err := c.save(tx); err != nil {
					tx.Rollback()
					t.Fatalf("%s: %v", c.name, err)
				}
				var events int64
				if err := tx.Raw(`SELECT count(*) FROM outbox_messages`).Scan(&events).Error; err != nil {
					t.Fatal(err)
				}
				got := locks(tx)
				tx.Rollback()
				if events < 2 { // the existing order's event and this case's
					t.Errorf("%s: %d outbox rows in the transaction, want the event written", c.name, events)
				}
				if got != c.want {
					t.Errorf("%s: %d commit-order locks held, want %d", c.name, got, c.want)
				}
			}
		})
	}
}
