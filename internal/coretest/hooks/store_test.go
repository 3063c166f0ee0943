package hooks_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

func placeOrders(t *testing.T, db *gorm.DB, n int) {
	t.Helper()
	orders := make([]Order, n)
	for i := range orders {
		orders[i].Place(float64(i))
	}
	if err := db.Create(&orders).Error; err != nil {
		t.Fatalf("Create: %v", err)
	}
}

func newStore(t *testing.T, db *gorm.DB) *sqlstore.Store {
	t.Helper()
	drv, err := hooks.NewDriver(db)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlstore.NewStore(drv, sqlstore.StoreConfig{RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s
}

// claimUntil claims as owner (publishing everything) until a claim returns
// want messages, and returns them.
func claimUntil(t *testing.T, s *sqlstore.Store, owner string, want int) []runtime.OutboxMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := publishBatch(t, s, owner, 100, nil)
		if len(got) == want {
			return got
		}
		if len(got) != 0 || time.Now().After(deadline) {
			t.Fatalf("claim returned %v, want %d messages", ids(got), want)
		}
		time.Sleep(5 * time.Millisecond) // polling the store until a retry is due
	}
}

// publishBatch claims up to limit messages as owner and marks them: the ones
// for which fail returns an error as failed, the others as published.
func publishBatch(t *testing.T, s *sqlstore.Store, owner string, limit int, fail func(runtime.OutboxMessage) error) []runtime.OutboxMessage {
	t.Helper()
	ctx := context.Background()
	// A claim fails, and the relay claims again, when the session lock's
	// check went unanswered during the lease renewal (a loaded machine:
	// "the session lock ended during the renewal"); so does this helper,
	// for a while.
	var b relay.Batch
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, err = s.Claim(ctx, relay.ClaimRequest{Owner: owner, Limit: limit}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim: %v", err)
		}
		t.Logf("Claim: %v; claiming again, as the relay would", err)
	}
	if len(b.Messages) == 0 {
		return nil
	}
	var out relay.Outcome
	for _, m := range b.Messages {
		if fail != nil {
			if err := fail(m); err != nil {
				out.Failed = append(out.Failed, relay.Failure{ID: m.ID, Err: err, Permanent: runtime.IsPermanent(err)})
				continue
			}
		}
		out.Published = append(out.Published, m.ID)
	}
	if err := s.Mark(ctx, b, out); err != nil {
		t.Fatalf("Mark: %v", err)
	}
	return b.Messages
}

func ids(msgs []runtime.OutboxMessage) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// sqlDBOf returns db's connection pool, for the store.
func sqlDBOf(t testing.TB, db *gorm.DB) *sql.DB {
	t.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	return sqlDB
}

func postgresWithPlugin(t *testing.T) *gorm.DB {
	t.Helper()
	return withPlugin(t, "postgres")
}

// withPlugin opens a fresh database of dialect (see openDB), migrated, with
// the plugin registered.
func withPlugin(t *testing.T, dialect string) *gorm.DB {
	t.Helper()
	db := openDB(t, dialect, nil)
	if err := hooks.Migrate(context.Background(), db, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		t.Fatal(err)
	}
	p, err := hooks.New(hooks.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestStoreListen(t *testing.T) {
	t.Parallel()
	db := postgresWithPlugin(t)
	s := newStore(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	notes := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { notes <- struct{}{} }) }()
	// Each wait has a deadline of its own, long enough for a machine busy
	// with other suites: only a notification that never comes fails.
	wait := func() bool {
		t.Helper()
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case <-notes:
			return true
		case err := <-done:
			t.Fatalf("Listen returned %v", err)
		case <-timer.C:
		}
		return false
	}
	if !wait() { // the initial call once listening
		t.Fatal("no initial notify")
	}
	// Writers notify while a relay waits for it: register r1 (a claim
	// takes its shards) and ask. Writers notify only while r1 holds shards
	// and its request has not lapsed (it lasts a LeaseTTL, 15 s, which only
	// a relay's renewals extend); under load the store may take r1's lock
	// for lost (its check did not answer in time) and drop its shards, so
	// the round is tried again then, and only a round during which r1
	// held its shards throughout must notify.
	for try := 1; ; try++ {
		claimed := time.Now()
		if _, err := s.Claim(ctx, relay.ClaimRequest{Owner: "r1", Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if err := s.RequestWake(ctx, "r1"); err != nil {
			t.Fatal(err)
		}
		placeOrders(t, db, 2) // one transaction, one statement: one notification
		lapsed := time.Since(claimed) > 15*time.Second
		if wait() {
			break
		}
		if _, _, lost := s.LeaseLost("r1"); try == 3 || !lost && !lapsed {
			t.Fatalf("no notification after a committed insert (try %d; r1 holds %d shards)", try, s.HeldShards("r1"))
		}
		t.Logf("try %d: r1 lost its shards or its request lapsed before the insert; again", try)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Listen after cancel = %v, want context.Canceled", err)
	}

	lite := newStore(t, hookstest.SQLite(t, nil))
	if err := lite.Listen(context.Background(), func() {}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SQLite Listen = %v, want errors.ErrUnsupported", err)
	}
}

// TestStoreHoldsNoTransactionWhilePublishing: between Claim and Mark — while
// the relay publishes — the store holds no transaction, no row lock and
// nothing that idle_in_transaction_session_timeout could kill (issue: the
// claim transaction stayed open across the broker call). The only
// connection it holds is its session lock's on PostgreSQL and MariaDB
// (sqlstore.StoreConfig.LeaseExpiryOnly), which is outside any
// transaction.
func TestStoreHoldsNoTransactionWhilePublishing(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		placeOrders(t, db, 3)
		s := newStore(t, db)
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Claim(context.Background(), relay.ClaimRequest{Owner: "x", Limit: 10})
		if err != nil || len(b.Messages) != 3 {
			t.Fatalf("Claim = %d messages, %v; want 3", len(b.Messages), err)
		}
		wantInUse := 1 // the session lock
		if db.Dialector.Name() == "sqlite" {
			wantInUse = 0
		}
		if inUse := sqlDB.Stats().InUse; inUse != wantInUse {
			t.Errorf("%d connections in use while the batch is being published, want %d", inUse, wantInUse)
		}
		if n := openTransactions(t, db); n != 0 {
			t.Errorf("the server has %d transactions open while the batch is being published, want 0", n)
		}
		if b.Deadline.IsZero() || time.Until(b.Deadline) <= 0 {
			t.Errorf("batch deadline %v: want the end of a lease still running", b.Deadline)
		}
		if err := s.Mark(context.Background(), b, relay.Outcome{Published: ids(b.Messages)}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStoreOwnersSplitShards: two relays' claims never share a shard, so
// never an aggregate — the fix for two relays publishing one aggregate out
// of order (rows 8, 9, 10 of one aggregate; another claim held 9; this
// one published 8 and 10). Together they cover every shard, and each
// takes an even share when both may publish (StoreConfig.MaxActiveRelays;
// by default one publishes and the other stands by).
func TestStoreOwnersSplitShards(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		for i := range 200 {
			if _, err := p.Enqueue(db, "order", fmt.Sprint(i%50), OrderPaid{EventVersion: 2, OccurredAt: now(), Method: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
		// One store per relay, as in two processes: the split lives in
		// the database, not in a store's memory.
		// Leases long enough that none lapses between two claims of a
		// loaded machine (with 1s, a CI run saw x's lapse and y take
		// aggregate 3 over, a legitimate move that this test would take
		// for a shared shard): the split changes only by rebalancing.
		stores := map[string]*sqlstore.Store{
			"x": mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: 20 * time.Second, MaxActiveRelays: 2}),
			"y": mustStore(t, db, sqlstore.StoreConfig{LeaseTTL: 20 * time.Second, MaxActiveRelays: 2}),
		}
		// x takes every shard first; then y joins: within a few renewals x
		// gives half back and y takes it.
		ctx := context.Background()
		if b, err := stores["x"].Claim(ctx, relay.ClaimRequest{Owner: "x", Limit: 1}); err != nil || len(b.Messages) != 1 {
			t.Fatalf("x: Claim = %v, %v", b.Messages, err)
		}
		var leases map[string]int
		deadline := time.Now().Add(10 * time.Second)
		for {
			for _, o := range []string{"x", "y"} {
				if _, err := stores[o].Claim(ctx, relay.ClaimRequest{Owner: o, Limit: 1}); err != nil {
					t.Fatal(err)
				}
			}
			leases = map[string]int{}
			var rows []struct {
				Owner string
				N     int
			}
			db.Raw(`SELECT owner, count(*) AS n FROM outbox_messages_leases WHERE owner IS NOT NULL GROUP BY owner`).Scan(&rows)
			for _, r := range rows {
				leases[r.Owner] = r.N
			}
			if leases["x"] == sqlstore.Shards/2 && leases["y"] == sqlstore.Shards/2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("shards held = %v, want %d each for x and y", leases, sqlstore.Shards/2)
			}
			time.Sleep(50 * time.Millisecond) // renewals happen on a schedule
		}
		// Claims of the two owners now never share an aggregate.
		seen := map[string]string{}
		for range 20 {
			for _, o := range []string{"x", "y"} {
				for _, m := range publishBatch(t, stores[o], o, 7, nil) {
					if prev, ok := seen[m.AggregateID]; ok && prev != o {
						t.Fatalf("aggregate %s claimed by %s and by %s", m.AggregateID, prev, o)
					}
					seen[m.AggregateID] = o
				}
			}
		}
	})
}

// TestStoreFailingAggregateDoesNotStarveOthers: an aggregate with more
// pending messages than a claim's limit, behind a message waiting for its
// retry, must not keep other aggregates' later messages from being claimed.
func TestStoreFailingAggregateDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		for i := range 11 {
			if _, err := p.Enqueue(db, "order", "1", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Enqueue(db, "order", "2", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "other"}); err != nil {
			t.Fatal(err)
		}
		s, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, db)), sqlstore.StoreConfig{RetryDelay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		// Order 1's first message fails; the rest of order 1 waits behind it.
		got := publishBatch(t, s, "x", 5, func(runtime.OutboxMessage) error { return errors.New("rejected") })
		if len(got) != 5 {
			t.Fatalf("first claim = %v, want 5 of order 1's messages", ids(got))
		}
		got = claimUntil(t, s, "x", 1)
		if got[0].AggregateID != "2" {
			t.Errorf("claim = %+v, want order 2's message", got)
		}
	})
}

// TestStorePartialOutageParkingKeepsOrder: with MaxAttempts set, a message
// that keeps failing while others are published (a partition down, say) is
// parked — and its aggregate's later messages wait behind it, so after
// Unpark the aggregate is published in order (issue: a parked message let
// its aggregate's later events go out past it).
func TestStorePartialOutageParkingKeepsOrder(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		enqueue := func(agg string) {
			t.Helper()
			if _, err := p.Enqueue(db, "order", agg, OrderPaid{EventVersion: 2, OccurredAt: now(), Method: agg}); err != nil {
				t.Fatal(err)
			}
		}
		enqueue("sick")
		enqueue("sick")
		s, err := sqlstore.NewStore(databasesql.New(sqlDBOf(t, db)), sqlstore.StoreConfig{RetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond, MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		sick := func(m runtime.OutboxMessage) error {
			if m.AggregateID == "sick" {
				return errors.New("NOT_LEADER_FOR_PARTITION")
			}
			return nil
		}
		var published []runtime.OutboxMessage
		has := func(msgs []runtime.OutboxMessage, agg string) bool {
			return slices.ContainsFunc(msgs, func(m runtime.OutboxMessage) bool { return m.AggregateID == agg })
		}
		for range 2 {
			enqueue("healthy") // something else goes out, so the failure counts
			deadline := time.Now().Add(10 * time.Second)
			for {
				got := publishBatch(t, s, "x", 10, sick)
				if has(got, "sick") && has(got, "healthy") {
					for _, m := range got {
						if m.AggregateID == "healthy" {
							published = append(published, m)
						}
					}
					break
				}
				if has(got, "sick") || has(got, "healthy") {
					// The sick message came alone (nothing published:
					// no attempt counted), or waited while the healthy
					// one went out: try again with another beside it.
					enqueue("healthy")
				}
				if time.Now().After(deadline) {
					t.Fatal("the sick aggregate was never claimed again")
				}
				time.Sleep(5 * time.Millisecond) // waiting out a 1ms retry delay
			}
		}
		var parked []int64
		db.Raw(`SELECT id FROM outbox_messages WHERE parked_at IS NOT NULL ORDER BY id`).Scan(&parked)
		if len(parked) != 1 {
			t.Fatalf("parked = %v, want the sick aggregate's first message", parked)
		}
		enqueue("sick")
		enqueue("healthy")
		got := claimUntil(t, s, "x", 1)
		if got[0].AggregateID != "healthy" {
			t.Fatalf("claim while sick's first message is parked = %+v, want only the healthy message", got)
		}
		if n, err := s.Unpark(context.Background(), parked...); err != nil || n != 1 {
			t.Fatalf("Unpark = %d, %v", n, err)
		}
		got = claimUntil(t, s, "x", 3)
		if diff := cmp.Diff([]int64{parked[0], parked[0] + 1}, ids(got)[:2]); diff != "" || got[2].AggregateID != "sick" {
			t.Errorf("after Unpark, sick's messages = %v, want %d, %d, then its third, in order", ids(got), parked[0], parked[0]+1)
		}
	})
}

// TestStoreDiscardLetsAggregateGoOn: a parked message discarded by an
// operator no longer holds its aggregate back.
func TestStoreDiscardLetsAggregateGoOn(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		for range 2 {
			if _, err := p.Enqueue(db, "order", "a", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		s := newStore(t, db)
		got := publishBatch(t, s, "x", 10, func(m runtime.OutboxMessage) error {
			return runtime.Permanent(errors.New("too large"))
		})
		if len(got) != 2 {
			t.Fatalf("claim = %v, want both", ids(got))
		}
		if got := publishBatch(t, s, "x", 10, nil); len(got) != 0 {
			t.Fatalf("claim with the first message parked = %v, want nothing", ids(got))
		}
		if n, err := s.Discard(context.Background(), got[0].ID); err != nil || n != 1 {
			t.Fatalf("Discard(%d) = %d, %v; want 1", got[0].ID, n, err)
		}
		if after := claimUntil(t, s, "x", 1); after[0].ID != got[1].ID {
			t.Errorf("after Discard, claim = %v, want %d", ids(after), got[1].ID)
		}
	})
}

// TestEnqueueCommitOrder: events of one aggregate written by concurrent
// transactions without a row lock (Enqueue) are claimed in commit order: a
// transaction that wrote first but commits last must not be published
// first (issue: one transaction held seq 0 open while 1..10 committed; the
// relay published 0 first, or 1..10 then 0, depending on timing). The
// ground truth is the partial order of commits the test observed: a commit
// that returned before another began comes first.
func TestEnqueueCommitOrder(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) { testEnqueueCommitOrder(t, dialect) })
	}
}

func testEnqueueCommitOrder(t *testing.T, dialect string) {
	db := withPlugin(t, dialect)
	p, err := hooks.New(hooks.Config{})
	if err != nil {
		t.Fatal(err)
	}
	type commit struct{ start, end time.Time }
	var (
		mu      sync.Mutex
		commits = map[string]commit{} // by payload method
	)
	write := func(tx *gorm.DB, seq string) {
		t.Helper()
		if _, err := p.Enqueue(tx, "order", "hot", OrderPaid{EventVersion: 2, OccurredAt: now(), Method: seq}); err != nil {
			t.Error(err)
		}
	}
	finish := func(tx *gorm.DB, seq string) {
		start := time.Now()
		if err := tx.Commit().Error; err != nil {
			t.Error(err)
		}
		mu.Lock()
		commits[seq] = commit{start, time.Now()}
		mu.Unlock()
	}
	long := db.Begin()
	write(long, "0")
	var wg sync.WaitGroup
	for i := 1; i <= 10; i++ {
		wg.Go(func() {
			tx := db.Begin()
			write(tx, fmt.Sprint(i))
			finish(tx, fmt.Sprint(i))
		})
	}
	// Hold "0" open until the others have committed or are waiting for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int64
		if dialect == "mysql" { // waiting for the commit-order row lock
			db.Raw(`SELECT count(*) FROM information_schema.processlist
				WHERE db = DATABASE() AND info LIKE 'INSERT INTO outbox_messages_locks%'`).Scan(&waiting)
		} else {
			// Waiting for this table's aggregate locks (two-key advisory
			// locks whose first key is the table's oid less 2^31).
			db.Raw(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2
				AND classid = ((('outbox_messages'::regclass::oid::int8 - 2147483648)::int4)::int8 & 4294967295)::oid`).Scan(&waiting)
		}
		mu.Lock()
		done := len(commits)
		mu.Unlock()
		if int(waiting)+done == 10 {
			break
		}
		if time.Now().After(deadline) {
			var pl []map[string]any
			db.Raw(`SELECT * FROM information_schema.processlist WHERE db = DATABASE()`).Scan(&pl)
			long.Rollback()
			t.Fatalf("after 10s: %d committed, %d waiting %v", done, waiting, pl)
		}
		time.Sleep(10 * time.Millisecond) // polling other transactions' progress
	}
	finish(long, "0")
	wg.Wait()

	s := newStore(t, db)
	got := claimUntil(t, s, "x", 11)
	var methods []string
	for _, m := range got {
		var e OrderPaid
		if err := json.Unmarshal(m.Payload, &e); err != nil {
			t.Fatal(err)
		}
		methods = append(methods, e.Method)
	}
	for i, a := range methods {
		for _, b := range methods[i+1:] {
			if commits[b].end.Before(commits[a].start) {
				t.Errorf("claim order %v: %s is before %s, but %s committed before %s began committing", methods, a, b, b, a)
			}
		}
	}
}

func TestStoreStats(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		s := newStore(t, db)
		st, err := s.Stats(context.Background())
		if err != nil || st != (relay.Stats{}) {
			t.Fatalf("Stats of an empty outbox = %+v, %v", st, err)
		}
		for _, agg := range []string{"a", "b", "c"} {
			if _, err := p.Enqueue(db, "order", agg, OrderPaid{EventVersion: 2, OccurredAt: now(), Method: agg}); err != nil {
				t.Fatal(err)
			}
		}
		// Make the oldest message an hour old, then fail b and park c.
		db.Exec(`UPDATE outbox_messages SET created_at = ? WHERE aggregate_id = 'a'`, time.Now().Add(-time.Hour).UTC())
		db.Exec(`UPDATE outbox_messages SET attempts = 2 WHERE aggregate_id = 'b'`)
		db.Exec(`UPDATE outbox_messages SET parked_at = ? WHERE aggregate_id = 'c'`, time.Now().UTC())
		st, err = s.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending != 2 || st.Retrying != 1 || st.Parked != 1 || st.OldestPending < 59*time.Minute || st.OldestPending > 2*time.Hour {
			t.Errorf("Stats = %+v, want 2 pending (1 retrying), 1 parked, oldest about 1h", st)
		}
	})
}

// TestStoreDeletePublished: retention deletes published rows older than the
// cutoff, in batches, and never a pending one.
func TestStoreDeletePublished(t *testing.T) {
	t.Parallel()
	eachDB(t, nil, hooks.Config{}, func(t *testing.T, db *gorm.DB, p *hooks.Plugin) {
		ctx := context.Background()
		s := newStore(t, db)
		placeOrders(t, db, 5)
		claimUntil(t, s, "x", 5) // publishes all five
		placeOrders(t, db, 2)    // pending
		if n, err := s.DeletePublished(ctx, time.Hour, 2); err != nil || n != 0 {
			t.Fatalf("DeletePublished(1h) = %d, %v; want 0 (nothing published an hour ago)", n, err)
		}
		time.Sleep(10 * time.Millisecond) // published_at strictly before the cutoff
		if n, err := s.DeletePublished(ctx, 0, 2); err != nil || n != 5 {
			t.Fatalf("DeletePublished(0, batch 2) = %d, %v; want 5", n, err)
		}
		if n := count(t, db, "outbox_messages"); n != 2 {
			t.Errorf("rows left = %d, want the 2 pending", n)
		}
		if st, err := s.Stats(ctx); err != nil || st.Pending != 2 {
			t.Errorf("Stats = %+v, %v; want 2 pending", st, err)
		}
	})
}

// openTransactions counts the transactions open on the server in db's
// database, other than the one asking (0 on SQLite, which has no server).
func openTransactions(t *testing.T, db *gorm.DB) int {
	t.Helper()
	var q string
	switch db.Dialector.Name() {
	case "postgres":
		q = `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			AND application_name = current_setting('application_name')
			AND state LIKE 'idle in transaction%'`
	case "mysql":
		q = `SELECT COUNT(*) FROM information_schema.innodb_trx t
			JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
			WHERE p.db = DATABASE() AND p.id <> CONNECTION_ID()`
	default:
		return 0
	}
	var n int
	if err := db.Raw(q).Scan(&n).Error; err != nil {
		t.Fatalf("count open transactions: %v", err)
	}
	return n
}
