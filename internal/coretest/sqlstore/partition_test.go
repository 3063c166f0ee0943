package sqlstore_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/runtimetest"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// partitioned opens a PostgreSQL schema of its own with a partitioned
// outbox table of hourly partitions.
func partitioned(t testing.TB) *sql.DB {
	t.Helper()
	db := openSQL(t, sqlstore.Postgres)
	if err := sqlstore.Migrate(context.Background(), databasesql.New(db), sqlstore.Schema{Outbox: true, Partitioned: &sqlstore.PartitionConfig{Interval: time.Hour, Ahead: 2}}); err != nil {
		t.Fatal(err)
	}
	return db
}

// eventIDAt returns a new UUIDv7 whose timestamp is at.
func eventIDAt(at time.Time) uuid.UUID {
	id := runtime.NewEventID()
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// partitionsOf returns the partitions of outbox_messages with their bounds.
func partitionsOf(t testing.TB, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query(`SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'outbox_messages'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			t.Fatal(err)
		}
		out[name] = bound
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// partitionOf names the partition that holds an event.
func partitionOf(t testing.TB, db *sql.DB, id uuid.UUID) string {
	t.Helper()
	var name string
	if err := db.QueryRow(`SELECT tableoid::regclass::text FROM outbox_messages WHERE event_id = $1`, id.String()).Scan(&name); err != nil {
		t.Fatalf("partition of %s: %v", id, err)
	}
	return name
}

// createPartition creates the hourly partition of outbox_messages that
// starts at from, as an operator's migration would for the past.
func createPartition(t testing.TB, db *sql.DB, from time.Time) string {
	t.Helper()
	name := "outbox_messages_" + strings.ToLower(from.UTC().Format("20060102t1504"))
	if _, err := db.Exec(`CREATE TABLE ` + name + ` PARTITION OF outbox_messages FOR VALUES FROM ('` +
		sqlstore.EventIDBound(from).String() + `') TO ('` + sqlstore.EventIDBound(from.Add(time.Hour)).String() + `')`); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestPartitionedStoreConformance runs the relay.Store conformance suite on
// a partitioned outbox table.
func TestPartitionedStoreConformance(t *testing.T) {
	t.Parallel()
	runtimetest.TestStore(t, func(t *testing.T) (relay.Store, func(...runtime.OutboxMessage) []int64) {
		db := partitioned(t)
		return conformanceStore(t, sqlstore.Postgres, databasesql.New(db), databasesql.Executor(db))
	})
}

// TestMigratePartitionedOutbox: the migration creates the DEFAULT partition
// and the current hour's and two after it; it is idempotent; MigrateOutbox
// leaves a partitioned table as it is; and a plain table is refused, not
// changed.
func TestMigratePartitionedOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := partitioned(t)
	parts := partitionsOf(t, db)
	now := time.Now().UTC().Truncate(time.Hour)
	for k := range 3 {
		name := "outbox_messages_" + strings.ToLower(now.Add(time.Duration(k)*time.Hour).Format("20060102t1504"))
		if _, ok := parts[name]; !ok && time.Now().UTC().Truncate(time.Hour).Equal(now) {
			t.Errorf("partition %s missing; have %v", name, parts)
		}
	}
	if parts["outbox_messages_default"] != "DEFAULT" {
		t.Errorf("no DEFAULT partition: %v", parts)
	}
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true, Partitioned: &sqlstore.PartitionConfig{Interval: time.Hour, Ahead: 2}}); err != nil {
		t.Errorf("second migration: %v", err)
	}
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		t.Errorf("MigrateOutbox on the partitioned table: %v", err)
	}
	if got := partitionsOf(t, db); len(got) != len(parts) {
		t.Errorf("partitions after migrating again: %v, want %v", got, parts)
	}

	plain := migrated(t, sqlstore.Postgres)
	err := sqlstore.Migrate(ctx, databasesql.New(plain), sqlstore.Schema{Outbox: true, Partitioned: &sqlstore.PartitionConfig{}})
	if !errors.Is(err, sqlstore.ErrNotPartitioned) {
		t.Errorf("MigratePartitionedOutbox on a plain table = %v, want ErrNotPartitioned", err)
	}
	for _, bad := range []sqlstore.PartitionConfig{{Interval: time.Second}, {Interval: time.Minute + time.Microsecond}, {Ahead: -1}} {
		if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true, Partitioned: &bad}); err == nil {
			t.Errorf("MigratePartitionedOutbox(%+v) accepted", bad)
		}
	}
}

// TestChangedIntervalLeavesNoGap: migrating an hourly-partitioned outbox
// with a daily Interval covers every hour ahead with a time partition: the
// rest of the day beside the hourly partitions gets one, not the DEFAULT
// partition (a new user's trial: the daily partitions began the next day,
// and retention, going by the newest partition's width, created no
// hourly one, so the rest of the day's events went to DEFAULT).
func TestChangedIntervalLeavesNoGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := partitioned(t) // hourly, 2 ahead
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true, Partitioned: &sqlstore.PartitionConfig{Interval: 24 * time.Hour, Ahead: 2}}); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().UTC().Truncate(time.Hour)
	rows := writeRows(make([]string, 48)...)
	for h := range rows {
		rows[h].Envelope.AggregateID = fmt.Sprint("agg-", h)
		rows[h].Envelope.EventID = eventIDAt(hour.Add(time.Duration(h)*time.Hour + 30*time.Minute))
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		t.Fatal(err)
	}
	for h, r := range rows {
		if got := partitionOf(t, db, r.Envelope.EventID); got == "outbox_messages_default" {
			t.Errorf("an event %dh ahead went to the DEFAULT partition; partitions: %v", h, partitionsOf(t, db))
		}
	}
}

// TestPartitionedWriterDeduplicates: the event id index stays unique across
// the whole partitioned table, so the writer's ON CONFLICT (event_id) still
// deduplicates; each event lands in its time's partition, and an id of
// another version in the DEFAULT partition.
func TestPartitionedWriterDeduplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := partitioned(t)
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rows := writeRows("1", "2")
	rows[1].Envelope.EventID = uuid.New() // a version 4 id
	for range 2 {
		if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
			t.Fatal(err)
		}
	}
	inserted, err := w.Write(ctx, databasesql.Executor(db), append(rows, rows[0]))
	if err != nil || len(inserted) != 0 {
		t.Errorf("Write of written events = %v, %v; want nothing inserted", inserted, err)
	}
	if n := count(t, db, sqlstore.Postgres, `SELECT count(*) FROM outbox_messages`); n != 2 {
		t.Errorf("%d rows after writing 2 events three times, want 2", n)
	}
	hour := time.Now().UTC().Truncate(time.Hour)
	if got, want := partitionOf(t, db, rows[0].Envelope.EventID), "outbox_messages_"+strings.ToLower(hour.Format("20060102t1504")); got != want && time.Now().UTC().Truncate(time.Hour).Equal(hour) {
		t.Errorf("a UUIDv7 event of now is in %s, want %s", got, want)
	}
	if got := partitionOf(t, db, rows[1].Envelope.EventID); got != "outbox_messages_default" && !strings.HasPrefix(got, "outbox_messages_") {
		t.Errorf("a version 4 event is in %s", got)
	}
}

// TestPartitionRetention: a pass drops an old partition whose rows are all
// published, keeps an old one that holds a pending row (and drops it once
// the row is published), creates the partitions ahead, and deletes the old
// published rows of the DEFAULT partition one by one.
func TestPartitionRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := partitioned(t)
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().UTC().Truncate(time.Hour)
	oldDone := createPartition(t, db, hour.Add(-72*time.Hour))
	oldPending := createPartition(t, db, hour.Add(-48*time.Hour))
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rows := writeRows("a", "b", "c", "d", "e")
	rows[0].Envelope.EventID = eventIDAt(hour.Add(-72 * time.Hour).Add(time.Minute))     // oldDone, published
	rows[1].Envelope.EventID = eventIDAt(hour.Add(-48 * time.Hour).Add(time.Minute))     // oldPending, published
	rows[2].Envelope.EventID = eventIDAt(hour.Add(-48 * time.Hour).Add(2 * time.Minute)) // oldPending, pending
	rows[3].Envelope.EventID = uuid.New()                                                // DEFAULT (or wherever its random bits fall), published long ago
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		t.Fatal(err)
	}
	if got := partitionOf(t, db, rows[0].Envelope.EventID); got != oldDone {
		t.Fatalf("old event in %s, want %s", got, oldDone)
	}
	inDefault := partitionOf(t, db, rows[3].Envelope.EventID) == "outbox_messages_default"
	old := time.Now().Add(-40 * time.Hour).UTC()
	for _, r := range []sqlstore.Row{rows[0], rows[1], rows[3]} {
		if _, err := db.Exec(`UPDATE outbox_messages SET published_at = $1 WHERE event_id = $2`, old, r.Envelope.EventID.String()); err != nil {
			t.Fatal(err)
		}
	}
	// The partition ahead that a stopped retention did not create yet.
	ahead := "outbox_messages_" + strings.ToLower(hour.Add(3*time.Hour).Format("20060102t1504"))
	if _, ok := partitionsOf(t, db)[ahead]; ok {
		t.Fatalf("%s exists before the pass", ahead)
	}

	r, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{PublishedAge: 24 * time.Hour, Partitions: sqlstore.PartitionConfig{Ahead: 3}})
	if err != nil {
		t.Fatal(err)
	}
	res := r.RunOnce(ctx)
	if res.Err != nil {
		t.Fatalf("pass: %v", res.Err)
	}
	parts := partitionsOf(t, db)
	if _, ok := parts[oldDone]; ok || res.PartitionsDropped != 1 {
		t.Errorf("%s (old, all published) not dropped: %+v", oldDone, res)
	}
	if _, ok := parts[oldPending]; !ok || !slices.Equal(res.PartitionsKept, []string{oldPending}) {
		t.Errorf("%s (old, a pending row) not kept: %+v", oldPending, res)
	}
	if _, ok := parts[ahead]; !ok || res.PartitionsCreated < 1 {
		t.Errorf("%s (ahead) not created: %+v, %v", ahead, res, parts)
	}
	if inDefault {
		if res.Published != 1 {
			t.Errorf("old published rows deleted from the DEFAULT partition: %d, want 1", res.Published)
		}
	}
	left := count(t, db, sqlstore.Postgres, `SELECT count(*) FROM outbox_messages`)
	if left != 3 {
		t.Errorf("%d rows left, want 3 (the old partition's pending and published rows, and the new one)", left)
	}

	// Once the pending row is published, its partition goes too.
	if _, err := db.Exec(`UPDATE outbox_messages SET published_at = now() WHERE event_id = $1`, rows[2].Envelope.EventID.String()); err != nil {
		t.Fatal(err)
	}
	res = r.RunOnce(ctx)
	if _, ok := partitionsOf(t, db)[oldPending]; ok || res.Err != nil || res.PartitionsDropped != 1 {
		t.Errorf("second pass: %+v; %s should be dropped", res, oldPending)
	}
	if n := count(t, db, sqlstore.Postgres, `SELECT count(*) FROM outbox_messages`); n != 1 {
		t.Errorf("%d rows left, want the young one", n)
	}
	if res := r.RunOnce(ctx); res.Err != nil || res.PartitionsDropped+len(res.PartitionsKept) != 0 || res.Published != 0 {
		t.Errorf("third pass did something: %+v", res)
	}
}

// orderBroker records each aggregate's events in publish order.
type orderBroker struct {
	mu  sync.Mutex
	got map[string][]string
	n   int
}

func (b *orderBroker) Publish(_ string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range msgs {
		agg := m.Metadata.Get(runtime.MetadataAggregateID)
		b.got[agg] = append(b.got[agg], m.UUID)
		b.n++
	}
	return nil
}

func (b *orderBroker) Close() error { return nil }

func (b *orderBroker) published() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// TestPartitionedRelayOrder: a relay publishes each aggregate's events in
// write (id) order even when their event ids go back and forth between
// partitions, and marks every one published (the mark's event id bounds
// span the batch).
func TestPartitionedRelayOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := partitioned(t)
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	offsets := []time.Duration{time.Hour, 0, 2 * time.Hour, -time.Minute, 30 * time.Minute} // next, this, after, this (or the last), DEFAULT...
	want := map[string][]string{}
	const perAgg = 20
	for i := range perAgg {
		var batch []sqlstore.Row
		for _, agg := range []string{"a", "b", "c"} {
			r := writeRows(agg)[0]
			switch {
			case agg == "c" && i%3 == 0:
				r.Envelope.EventID = uuid.New()
			default:
				r.Envelope.EventID = eventIDAt(now.Add(offsets[(i+len(agg))%len(offsets)]))
			}
			want[agg] = append(want[agg], r.Envelope.EventID.String())
			batch = append(batch, r)
		}
		if _, err := w.Write(ctx, databasesql.Executor(db), batch); err != nil {
			t.Fatal(err)
		}
	}
	broker := relayUntilDrained(t, store, db, 7, 3*perAgg)
	broker.mu.Lock()
	defer broker.mu.Unlock()
	for agg, ids := range want {
		if !slices.Equal(broker.got[agg], ids) {
			t.Errorf("aggregate %s published %v, want %v", agg, broker.got[agg], ids)
		}
	}
	if n := count(t, db, sqlstore.Postgres, `SELECT count(*) FROM outbox_messages WHERE published_at IS NULL`); n != 0 {
		t.Errorf("%d rows not marked published", n)
	}
}

// TestPartitionDropBesideWritersAndRelay drops an old partition while
// writers insert and a relay publishes: no write or mark fails (they wait
// at most for the drop's brief lock), every event is published once, and
// the partition goes (a pass whose lock wait timed out is retried).
func TestPartitionDropBesideWritersAndRelay(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 4, 100
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := partitioned(t)
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().UTC().Truncate(time.Hour)
	old := createPartition(t, db, hour.Add(-72*time.Hour))
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	oldRows := writeRows("x", "y", "z")
	for i := range oldRows {
		oldRows[i].Envelope.EventID = eventIDAt(hour.Add(-72 * time.Hour).Add(time.Duration(i) * time.Minute))
	}
	if _, err := w.Write(ctx, databasesql.Executor(db), oldRows); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE outbox_messages SET published_at = now() - interval '3 days'`); err != nil {
		t.Fatal(err)
	}
	broker := &orderBroker{got: map[string][]string{}}
	rl, err := relay.New(store, broker, relay.Config{BatchSize: 20, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range perWriter {
				if _, err := w.Write(ctx, databasesql.Executor(db), writeRows("w"+string(rune('a'+i))+"-"+string(rune('a'+j%5)))); err != nil {
					t.Errorf("writer %d: %v", i, err)
					return
				}
			}
		})
	}
	r, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{PublishedAge: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	dropped := 0
	for dropped == 0 && time.Now().Before(deadline) {
		res := r.RunOnce(ctx)
		dropped += res.PartitionsDropped
	}
	wg.Wait()
	for (broker.published() < writers*perWriter || stats(t, db).Pending > 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling for the outcome
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("relay: %v", err)
	}
	if _, ok := partitionsOf(t, db)[old]; ok || dropped != 1 {
		t.Errorf("%s not dropped (%d dropped)", old, dropped)
	}
	if n := broker.published(); n != writers*perWriter {
		t.Errorf("published %d events, want %d once each", n, writers*perWriter)
	}
	if n := count(t, db, sqlstore.Postgres, `SELECT count(*) FROM outbox_messages`); n != writers*perWriter {
		t.Errorf("%d rows, want the %d new ones", n, writers*perWriter)
	}
}

// TestPartitionRetentionWithoutDefault: a partitioned table of one's own
// DDL may have no DEFAULT partition; a pass then only creates and drops
// partitions.
func TestPartitionRetentionWithoutDefault(t *testing.T) {
	t.Parallel()
	db := partitioned(t)
	if _, err := db.Exec(`DROP TABLE outbox_messages_default`); err != nil {
		t.Fatal(err)
	}
	old := createPartition(t, db, time.Now().UTC().Truncate(time.Hour).Add(-72*time.Hour))
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{PublishedAge: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.RunOnce(context.Background()); res.Err != nil || res.PartitionsDropped != 1 || res.Published != 0 {
		t.Errorf("pass: %+v, want %s dropped and nothing else", res, old)
	}
}

// TestPartitionCreatedOverDefaultRows: events written past the partitions
// created ahead land in the DEFAULT partition; once their interval is due,
// a retention pass creates its partition all the same (PostgreSQL refuses
// a partition whose range has rows in the DEFAULT one, SQLSTATE 23514, so
// without the move every pass failed) and moves them into it unchanged: the
// published row stays published, the pending one stays pending, keeps its
// id and is then published, in order with its aggregate's later event.
func TestPartitionCreatedOverDefaultRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := partitioned(t) // the current hour and two ahead
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().UTC().Truncate(time.Hour)
	far := hour.Add(4 * time.Hour) // no partition yet
	rows := writeRows("a", "b")
	rows[0].Envelope.EventID = eventIDAt(far.Add(time.Minute))     // published
	rows[1].Envelope.EventID = eventIDAt(far.Add(2 * time.Minute)) // pending
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		t.Fatal(err)
	}
	later := writeRows("b") // b's next event, in the current hour
	if _, err := w.Write(ctx, databasesql.Executor(db), later); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if got := partitionOf(t, db, r.Envelope.EventID); got != "outbox_messages_default" {
			t.Fatalf("event %s in %s before the pass, want the DEFAULT partition", r.Envelope.EventID, got)
		}
	}
	if _, err := db.Exec(`UPDATE outbox_messages SET published_at = now() WHERE event_id = $1`, rows[0].Envelope.EventID.String()); err != nil {
		t.Fatal(err)
	}
	var idBefore int64
	if err := db.QueryRow(`SELECT id FROM outbox_messages WHERE event_id = $1`, rows[1].Envelope.EventID.String()).Scan(&idBefore); err != nil {
		t.Fatal(err)
	}

	r, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{PublishedAge: 24 * time.Hour, Partitions: sqlstore.PartitionConfig{Ahead: 5}})
	if err != nil {
		t.Fatal(err)
	}
	res := r.RunOnce(ctx)
	if res.Err != nil {
		t.Fatalf("pass: %v", res.Err)
	}
	want := "outbox_messages_" + strings.ToLower(far.Format("20060102t1504"))
	if res.PartitionRowsMoved != 2 || res.PartitionsCreated != 3 {
		t.Errorf("pass: %+v, want 3 partitions created and 2 rows moved", res)
	}
	for _, r := range rows {
		if got := partitionOf(t, db, r.Envelope.EventID); got != want {
			t.Errorf("event %s in %s after the pass, want %s", r.Envelope.EventID, got, want)
		}
	}
	var idAfter int64
	var published sql.NullTime
	if err := db.QueryRow(`SELECT id, published_at FROM outbox_messages WHERE event_id = $1`, rows[1].Envelope.EventID.String()).Scan(&idAfter, &published); err != nil {
		t.Fatal(err)
	}
	if idAfter != idBefore || published.Valid {
		t.Errorf("moved pending row: id %d (was %d), published_at %v: want the same id, still pending", idAfter, idBefore, published)
	}
	if n := count(t, db, sqlstore.Postgres, `SELECT count(*) FROM outbox_messages WHERE published_at IS NOT NULL`); n != 1 {
		t.Errorf("%d published rows after the move, want 1", n)
	}
	if res := r.RunOnce(ctx); res.Err != nil || res.PartitionsCreated != 0 || res.PartitionRowsMoved != 0 {
		t.Errorf("second pass: %+v, want nothing to create", res)
	}

	broker := relayUntilDrained(t, store, db, 0, 2)
	broker.mu.Lock()
	defer broker.mu.Unlock()
	if wantB := []string{rows[1].Envelope.EventID.String(), later[0].Envelope.EventID.String()}; !slices.Equal(broker.got["b"], wantB) {
		t.Errorf("aggregate b published %v, want %v", broker.got["b"], wantB)
	}
	if len(broker.got["a"]) != 0 {
		t.Errorf("aggregate a's published event published again: %v", broker.got["a"])
	}
}

// relayUntilDrained runs a relay of store (batches of batchSize, 0: the
// default) into an orderBroker until it published at least published
// messages and nothing is pending in db, or 30 s passed, and returns the
// broker.
func relayUntilDrained(t *testing.T, store relay.Store, db *sql.DB, batchSize, published int) *orderBroker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	broker := &orderBroker{got: map[string][]string{}}
	rl, err := relay.New(store, broker, relay.Config{BatchSize: batchSize, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for (broker.published() < published || stats(t, db).Pending > 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling for the outcome
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("relay: %v", err)
	}
	return broker
}
