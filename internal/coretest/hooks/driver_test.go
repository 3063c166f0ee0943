package hooks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// TestDriverWritesInTheGORMTransaction: rows a Writer writes through
// Driver.UnwrapExecutor inside db.Transaction commit and roll back with
// GORM's own writes, and the store on the same driver claims exactly the
// committed ones, on each database.
func TestDriverWritesInTheGORMTransaction(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB, *gorm.Config) *gorm.DB{
		"sqlite": hookstest.SQLite, "postgres": hookstest.Postgres, "mysql": hookstest.MariaDB,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := open(t, nil)
			if err := hooks.Migrate(ctx, db, ""); err != nil {
				t.Fatal(err)
			}
			drv, err := hooks.NewDriver(db)
			if err != nil {
				t.Fatal(err)
			}
			d, err := drv.Dialect()
			if err != nil {
				t.Fatal(err)
			}
			w, err := sqlstore.NewWriter(d, "", sqlstore.WriterConfig{})
			if err != nil {
				t.Fatal(err)
			}
			row := func(agg string) sqlstore.Row {
				return sqlstore.Row{Topic: "orders", Envelope: runtime.Envelope{
					EventID: runtime.NewEventID(), EventType: "orders.placed", EventVersion: 1,
					AggregateType: "order", AggregateID: agg, OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
					Payload: []byte(`{}`),
				}}
			}
			committed := row("committed")
			if err := db.Transaction(func(tx *gorm.DB) error {
				_, err := w.Write(ctx, drv.UnwrapExecutor(tx), []sqlstore.Row{committed})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			errRollback := errors.New("roll back")
			if err := db.Transaction(func(tx *gorm.DB) error {
				if _, err := w.Write(ctx, drv.UnwrapExecutor(tx), []sqlstore.Row{row("rolled-back")}); err != nil {
					return err
				}
				return errRollback
			}); !errors.Is(err, errRollback) {
				t.Fatalf("Transaction = %v, want the rollback", err)
			}
			store, err := sqlstore.NewStore(drv, sqlstore.StoreConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "a", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Messages) != 1 || b.Messages[0].EventID != committed.Envelope.EventID {
				t.Fatalf("claimed %+v, want only the committed event %s", b.Messages, committed.Envelope.EventID)
			}
		})
	}
}

// TestNewDriverRefusesNil: a nil database is a typed error.
func TestNewDriverRefusesNil(t *testing.T) {
	if _, err := hooks.NewDriver(nil); !errors.Is(err, sqlstore.ErrInvalidConfig) {
		t.Fatalf("NewDriver(nil) = %v, want ErrInvalidConfig", err)
	}
}

// unwrapped is the model TestDriverUnwrapTx writes.
type unwrapped struct {
	ID   int64
	Name string
}

// TestDriverUnwrapTx: a GORM session from Driver.UnwrapTx writes in the
// transaction the driver began, under the given context, and its writes
// commit and roll back with that transaction; a transaction the driver did
// not begin gives nil.
func TestDriverUnwrapTx(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(testing.TB, *gorm.Config) *gorm.DB{
		"sqlite": hookstest.SQLite, "postgres": hookstest.Postgres, "mysql": hookstest.MariaDB,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			type key struct{}
			ctx := context.WithValue(context.Background(), key{}, name)
			db := open(t, nil)
			if err := db.AutoMigrate(&unwrapped{}); err != nil {
				t.Fatal(err)
			}
			drv, err := hooks.NewDriver(db)
			if err != nil {
				t.Fatal(err)
			}
			for _, commit := range []bool{true, false} {
				tx, err := drv.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				g := drv.UnwrapTx(ctx, tx)
				if g == nil {
					t.Fatal("UnwrapTx of the driver's own transaction = nil")
				}
				if got := g.Statement.Context.Value(key{}); got != name {
					t.Errorf("the session's context carries %v, want %q", got, name)
				}
				if err := g.Create(&unwrapped{Name: map[bool]string{true: "committed", false: "rolled back"}[commit]}).Error; err != nil {
					t.Fatal(err)
				}
				if commit {
					err = tx.Commit(ctx)
				} else {
					err = tx.Rollback(ctx)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			var names []string
			if err := db.Model(&unwrapped{}).Order("id").Pluck("name", &names).Error; err != nil {
				t.Fatal(err)
			}
			if len(names) != 1 || names[0] != "committed" {
				t.Errorf("rows = %q, want only the committed one", names)
			}
			if g := drv.UnwrapTx(ctx, nil); g != nil {
				t.Errorf("UnwrapTx(nil) = %v, want nil", g)
			}
		})
	}
}
