package hooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
)

// Fragile is an aggregate whose event code can be made to panic: its
// AggregateID panics when PanicID is set.
type Fragile struct {
	ID      int64 `gorm:"primaryKey"`
	Status  string
	PanicID bool `gorm:"-"`
	runtime.Recorder
}

func (f *Fragile) AggregateID() string {
	if f.PanicID {
		panic("aggregate id exploded")
	}
	return "" // the primary key
}

// Boom is an event whose Validate or MarshalJSON panics, by Mode.
type Boom struct {
	Mode       string    `json:"mode"`
	OccurredAt time.Time `json:"occurred_at"`
}

func (Boom) EventKey() runtime.Key  { return runtime.Key{Type: "fragile.boom", Version: 1} }
func (e Boom) EventTime() time.Time { return e.OccurredAt }
func (e Boom) Validate() error {
	if e.Mode == "validate" {
		panic("validate exploded")
	}
	return nil
}

func (e Boom) MarshalJSON() ([]byte, error) {
	if e.Mode == "marshal" {
		panic(errors.New("marshal exploded"))
	}
	type plain Boom
	return json.Marshal(plain(e))
}

// TestPanicInEventCodeRollsBack: a panic in event code during a save (a
// typed-nil event, a panicking Validate or MarshalJSON, a panicking
// AggregateID) must not leak the save's transaction. Before the fix the
// implicit transaction stayed open holding the aggregate's row lock, and the
// next save of that aggregate blocked until its deadline.
func TestPanicInEventCodeRollsBack(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		record func(f *Fragile)
	}{
		{"typed nil event", func(f *Fragile) { f.Record((*OrderPaid)(nil)) }},
		{"Validate panics", func(f *Fragile) { f.Record(Boom{Mode: "validate", OccurredAt: now()}) }},
		{"MarshalJSON panics", func(f *Fragile) { f.Record(Boom{Mode: "marshal", OccurredAt: now()}) }},
		{"AggregateID panics", func(f *Fragile) {
			f.PanicID = true
			f.Record(Boom{OccurredAt: now()})
		}},
	}
	for _, skip := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/SkipDefaultTransaction=%v", tc.name, skip), func(t *testing.T) {
				t.Parallel()
				db := postgresWithIdleTimeout(t, &gorm.Config{SkipDefaultTransaction: skip})
				if err := hooks.Migrate(context.Background(), db, ""); err != nil {
					t.Fatal(err)
				}
				if err := db.AutoMigrate(&Fragile{}); err != nil {
					t.Fatal(err)
				}
				p, err := hooks.New(hooks.Config{})
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Use(p); err != nil {
					t.Fatal(err)
				}
				agg := &Fragile{Status: "new"}
				if err := db.Create(agg).Error; err != nil {
					t.Fatal(err)
				}

				agg.Status = "broken"
				tc.record(agg)
				var recovered any
				func() {
					defer func() { recovered = recover() }()
					err = db.Save(agg).Error
				}()
				if recovered != nil {
					t.Errorf("Save panicked: %v; want an error", recovered)
				}
				var pe *hooks.PanicError
				if recovered == nil && !errors.As(err, &pe) {
					t.Errorf("Save = %v, want a *hooks.PanicError", err)
				}
				if recovered == nil {
					var we *hooks.WriteError
					if !errors.As(err, &we) {
						t.Errorf("Save = %v, want a *hooks.WriteError", err)
					}
				}
				if n := len(agg.Events()); n != 1 {
					t.Errorf("pending after the failed save = %d, want 1 (nothing lost)", n)
				}

				// The next save of the same aggregate, from another goroutine,
				// must not wait for a lock the failed save still holds.
				done := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					fresh := &Fragile{ID: agg.ID, Status: "fixed"}
					fresh.Record(Boom{Mode: "fine", OccurredAt: now()})
					done <- db.WithContext(ctx).Save(fresh).Error
				}()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("next save of the aggregate: %v (blocked by the failed save's transaction?)", err)
					}
				case <-time.After(15 * time.Second):
					t.Fatal("next save of the aggregate did not complete within 15s")
				}

				var status string
				if err := db.Raw(`SELECT status FROM fragiles WHERE id = ?`, agg.ID).Scan(&status).Error; err != nil {
					t.Fatal(err)
				}
				if status != "fixed" {
					t.Errorf("status = %q, want fixed (the failed save rolled back)", status)
				}
				got := rows(t, db)
				if len(got) != 1 || got[0].Payload == "" {
					t.Fatalf("outbox rows = %+v, want the fixed save's event only", got)
				}
				var b Boom
				if err := json.Unmarshal([]byte(got[0].Payload), &b); err != nil || b.Mode != "fine" {
					t.Errorf("outbox row = %+v, want the fixed save's event", got[0])
				}
			})
		}
	}
}

// postgresWithIdleTimeout is hookstest.Postgres with the server ending any
// session left idle in a transaction for 8s, so that a leaked transaction
// fails the test instead of hanging it (and its schema's cleanup).
func postgresWithIdleTimeout(t *testing.T, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	cfg.Logger = logger.Discard
	db, err := gorm.Open(postgres.Open(hookstest.PostgresDSN(t)+"&idle_in_transaction_session_timeout=8000"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db
}

// Hooked records its event in a BeforeSave model hook, from Method; an empty
// Method makes the event invalid.
type Hooked struct {
	ID     int64 `gorm:"primaryKey"`
	Status string
	Method string `gorm:"-"`
	runtime.Recorder
}

func (h *Hooked) BeforeSave(*gorm.DB) error {
	h.Record(OrderPaid{EventVersion: 2, OccurredAt: now(), Method: h.Method})
	return nil
}

// TestSkipDefaultTransactionHookRecordedEvents: with SkipDefaultTransaction,
// an event recorded in a BeforeSave hook commits with the business row, and
// one that fails validation leaves no business row behind. Before the fix the
// plugin decided to begin a transaction before the hook had recorded
// anything, so the row committed on its own.
func TestSkipDefaultTransactionHookRecordedEvents(t *testing.T) {
	t.Parallel()
	cfg := func() *gorm.Config { return &gorm.Config{SkipDefaultTransaction: true} }
	eachDB(t, cfg, hooks.Config{}, func(t *testing.T, db *gorm.DB, _ *hooks.Plugin) {
		if err := db.AutoMigrate(&Hooked{}); err != nil {
			t.Fatal(err)
		}
		good := &Hooked{Status: "placed", Method: "card"}
		if err := db.Create(good).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		if n := count(t, db, "outbox_messages"); n != 1 {
			t.Fatalf("outbox rows = %d, want 1", n)
		}
		if n := len(good.Events()); n != 0 {
			t.Errorf("pending after the committed Create = %d, want 0", n)
		}

		bad := &Hooked{Status: "placed"} // no Method: the hook records an invalid event
		err := db.Create(bad).Error
		var ee *runtime.EncodeError
		if !errors.As(err, &ee) {
			t.Fatalf("Create(invalid hook event) = %v, want *runtime.EncodeError", err)
		}
		if n := count(t, db, "hookeds"); n != 1 {
			t.Errorf("rows = %d, want 1: the failed Create must roll back its business row", n)
		}

		// An update through Save: the failed event keeps the old state.
		good.Status, good.Method = "refunded", ""
		if err := db.Save(good).Error; !errors.As(err, &ee) {
			t.Fatalf("Save(invalid hook event) = %v, want *runtime.EncodeError", err)
		}
		var status string
		if err := db.Raw(`SELECT status FROM hookeds WHERE id = ?`, good.ID).Scan(&status).Error; err != nil {
			t.Fatal(err)
		}
		if status != "placed" {
			t.Errorf("status = %q, want placed: the failed Save must roll back", status)
		}
		if n := count(t, db, "outbox_messages"); n != 1 {
			t.Errorf("outbox rows = %d, want 1", n)
		}
	})
}
