package consumer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
)

func TestPruneInbox(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t)
			drv := driver(t, db)
			var now atomic.Int64
			now.Store(t0.UnixNano())
			clock := runtime.ClockFunc(func() time.Time { return time.Unix(0, now.Load()).UTC() })
			cfg := consumer.Config{Name: "billing", DB: drv, Clock: clock, InboxRetention: time.Hour, PruneBatchSize: 10}
			c := newConsumer(t, newRegistry(t, 2), cfg)
			must(t, consumer.Handle(c, drv, writeEffect("billing")))
			cfg.Name = "stats"
			other := newConsumer(t, newRegistry(t, 2), cfg)
			must(t, consumer.Handle(other, drv, writeEffect("stats")))

			var old, recent []string
			for i := range 25 { // processed at t0
				msg := paidMessage(t, 2, orderName(i), 1)
				must(t, c.HandlerFunc()(msg))
				must(t, other.HandlerFunc()(redeliver(msg)))
				old = append(old, msg.UUID)
			}
			now.Store(t0.Add(50 * time.Minute).UnixNano())
			for i := range 5 { // processed 50 minutes later
				msg := paidMessage(t, 2, orderName(i), 2)
				must(t, c.HandlerFunc()(msg))
				recent = append(recent, msg.UUID)
			}
			now.Store(t0.Add(70 * time.Minute).UnixNano()) // the t0 entries are past the hour
			inboxSize(t, c, 30)
			inboxSize(t, other, 25)
			n, err := c.PruneInbox(context.Background())
			if err != nil || n != 25 {
				t.Fatalf("PruneInbox = %d, %v; want 25 (three batches of at most 10)", n, err)
			}
			inboxSize(t, c, 5)
			inboxSize(t, other, 25)
			var left []string
			must(t, db.Table(consumer.DefaultTable).Where("consumer = ?", "billing").Order("event_id").Pluck("event_id", &left).Error)
			if diff := cmp.Diff(sorted(recent), left); diff != "" {
				t.Errorf("billing inbox after pruning (-want +got):\n%s", diff)
			}
			if n := count(t, db.Where("consumer = ?", "stats"), consumer.DefaultTable); n != 25 {
				t.Errorf("stats inbox = %d entries, want 25 (pruning is per consumer)", n)
			}
			// A pruned event is applied again if it comes back: retention must
			// outlast every redelivery horizon.
			n, err = c.PruneInbox(context.Background())
			if err != nil || n != 0 {
				t.Errorf("second PruneInbox = %d, %v; want 0", n, err)
			}

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := other.PruneInbox(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("PruneInbox(cancelled) = %v", err)
			}
		})
	}
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

func TestPruneInboxWithoutDB(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c"})
	if _, err := c.PruneInbox(context.Background()); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("PruneInbox without DB = %v, want ErrInvalidConfig", err)
	}
	if _, err := c.InboxSize(context.Background()); !errors.Is(err, consumer.ErrInvalidConfig) {
		t.Errorf("InboxSize without DB = %v, want ErrInvalidConfig", err)
	}
}

// inboxSize checks c's InboxSize.
func inboxSize(t *testing.T, c *consumer.Consumer, want int64) {
	t.Helper()
	if n, err := c.InboxSize(context.Background()); err != nil || n != want {
		t.Errorf("%s: InboxSize = %d, %v; want %d", c.Name(), n, err, want)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := open(t) // migrated once already
			drv := driver(t, db)
			for range 2 {
				if err := consumer.Migrate(context.Background(), drv, ""); err != nil {
					t.Fatalf("Migrate again = %v", err)
				}
			}
			must(t, consumer.Migrate(context.Background(), drv, "custom_inbox"))
			if name == "mysql" { // index names are per table, and the table's may take 63 bytes
				must(t, consumer.Migrate(context.Background(), drv, strings.Repeat("x", 63)))
			}
			c := newConsumer(t, newRegistry(t, 2), consumer.Config{Name: "c", DB: drv, Table: "custom_inbox"})
			must(t, consumer.Handle(c, drv, writeEffect("c")))
			must(t, c.HandlerFunc()(paidMessage(t, 2, "o-1", 1)))
			if n := count(t, db, "custom_inbox"); n != 1 {
				t.Errorf("custom_inbox = %d entries, want 1", n)
			}
		})
	}
}

func TestDDL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect, table string
		want           error
		contains       string
	}{
		{"postgres", "", nil, "CREATE TABLE IF NOT EXISTS outbox_inbox"},
		{"postgres", "billing.inbox", nil, "CREATE INDEX IF NOT EXISTS inbox_processed_at ON billing.inbox"},
		{"sqlite", "main.inbox", nil, "CREATE INDEX IF NOT EXISTS main.inbox_processed_at ON inbox"},
		{"sqlite", "", nil, "PRIMARY KEY (consumer, event_id)"},
		{"mysql", "", nil, "KEY processed_at (consumer, processed_at)"},
		{"mysql", strings.Repeat("x", 63), nil, "PRIMARY KEY (consumer, event_id)"},
		{"mysql", "billing.inbox", nil, "CREATE TABLE IF NOT EXISTS billing.inbox"},
		{"pgx", "", nil, "UUID"},
		{"oracle", "", consumer.ErrUnsupportedDialect, ""},
		{"postgres", "in box", consumer.ErrInvalidTable, ""},
		{"postgres", "a.b.c", consumer.ErrInvalidTable, ""},
		{"postgres", strings.Repeat("x", 64), consumer.ErrInvalidTable, ""},
	} {
		stmts, err := consumer.DDL(tc.dialect, tc.table)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("DDL(%q, %q) = %v, want %v", tc.dialect, tc.table, err, tc.want)
			continue
		}
		if tc.contains != "" && !strings.Contains(strings.Join(stmts, "\n"), tc.contains) {
			t.Errorf("DDL(%q, %q) = %q, want it to contain %q", tc.dialect, tc.table, stmts, tc.contains)
		}
	}
}
