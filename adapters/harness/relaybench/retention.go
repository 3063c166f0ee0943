package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// retentionDays is the event time the -retention-compare mode spreads its
// events over, and retentionAge the retention's PublishedAge: the oldest
// 3 of 10 days go.
const (
	retentionDays = 10
	retentionAge  = 7 * 24 * time.Hour
)

// retentionRun is the retention comparison (-retention-compare N). For a
// plain outbox table with delete-based retention, and for a table
// partitioned by day (sqlstore.Migrate with Schema.Partitioned) whose retention
// drops partitions, it:
//
//  1. fills the table with N events in time order, their UUIDv7 event ids
//     and created_at spread over the last 10 days (PostgreSQL generates
//     the rows, -payload bytes each, over -aggregates aggregates), all
//     published except the newest -retention-pending;
//  2. drains the pending ones with one relay (sqlstore.Store, a publisher
//     that acknowledges at once): events/s with the full table;
//  3. runs one retention pass with PublishedAge 7 days (the oldest 3 days of
//     events go): its time, and the table's size (every partition, indexes
//     and TOAST) and dead tuples before and after;
//  4. writes and drains -retention-pending more events: events/s after the
//     retention, before any VACUUM;
//  5. runs VACUUM and reports the size again.
func retentionRun(ctx context.Context, o options, out io.Writer) error {
	fmt.Fprintf(out, "relaybench: retention comparison: %d events over %d days (UUIDv7 ids, %d B payloads, %d aggregates), the newest %d pending; retention age %v; PostgreSQL %s\n\n",
		o.retentionEvents, retentionDays, o.payload, o.aggregates, o.retentionPending, retentionAge, redact(o.dsn))
	fmt.Fprintln(out, "| layout | fill (s) | relay events/s, full table | size before retention (MB) | retention pass (s) | removed | rows before → after | size after (MB) | dead tuples after | relay events/s after retention | size after those events and VACUUM (MB) | VACUUM (s) |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, partitioned := range []bool{false, true} {
		if err := retentionLayout(ctx, o, partitioned, out); err != nil {
			return err
		}
	}
	return nil
}

func retentionLayout(ctx context.Context, o options, partitioned bool, out io.Writer) error {
	gdb, _, cleanup, err := openSchema(o.dsn)
	if err != nil {
		return err
	}
	defer cleanup()
	db, err := gdb.DB()
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(8)
	table := sqlstore.DefaultTable
	layout := "plain table, delete-based retention"
	now := time.Now().UTC()
	first := now.Add(-retentionDays * 24 * time.Hour)
	if partitioned {
		layout = "partitioned by day, partition drop"
		if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Outbox: true, OutboxTable: table, Partitioned: &sqlstore.PartitionConfig{Interval: 24 * time.Hour}}); err != nil {
			return err
		}
		// The past days' partitions, as they would have been created
		// ahead while the events came in.
		for day := first.Truncate(24 * time.Hour); day.Before(now.Truncate(24 * time.Hour)); day = day.Add(24 * time.Hour) {
			if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+`_`+strings.ToLower(day.Format("20060102t1504"))+` PARTITION OF `+table+
				` FOR VALUES FROM ('`+sqlstore.EventIDBound(day).String()+`') TO ('`+sqlstore.EventIDBound(day.Add(24*time.Hour)).String()+`')`); err != nil {
				return err
			}
		}
	} else if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true, OutboxTable: table}); err != nil {
		return err
	}
	vlog := func(format string, args ...any) {
		if o.verbose {
			fmt.Fprintf(os.Stderr, "relaybench: %s: "+format+"\n", append([]any{layout}, args...)...)
		}
	}

	start := time.Now()
	n := int64(o.retentionEvents)
	span := now.Sub(first)
	if err := fillTimed(ctx, db, o, 1, n, first, span, n-int64(o.retentionPending)); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `ANALYZE `+table); err != nil {
		return err
	}
	fill := time.Since(start)
	vlog("filled in %v", fill)

	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		return err
	}
	defer store.Close()
	pub := ackPublisher{}
	d, err := drainRelays(ctx, []relay.Store{store}, []message.Publisher{pub}, o.batch, o.retentionPending)
	if err != nil {
		return err
	}
	rateFull := float64(o.retentionPending) / d.Seconds()
	vlog("drained in %v", d)
	before, _, err := tableSize(ctx, db, table)
	if err != nil {
		return err
	}
	var rowsBefore, rowsAfter int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&rowsBefore); err != nil {
		return err
	}

	ret, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{PublishedAge: retentionAge, Logger: quietLogger()})
	if err != nil {
		return err
	}
	res := ret.RunOnce(ctx)
	if res.Err != nil {
		return fmt.Errorf("%s: retention: %w", layout, res.Err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&rowsAfter); err != nil {
		return err
	}
	removed := strconv.FormatInt(res.Published, 10) + " rows deleted"
	if partitioned {
		removed = fmt.Sprintf("%d partitions dropped, %d rows deleted", res.PartitionsDropped, res.Published)
	}
	vlog("retention: %+v", res)
	// The statistics collector publishes counts at most once a second.
	time.Sleep(1500 * time.Millisecond)
	after, dead, err := tableSize(ctx, db, table)
	if err != nil {
		return err
	}

	// More events, published now: the relay on the table as retention
	// left it.
	if err := fillTimed(ctx, db, o, n+1, n+int64(o.retentionPending), now, time.Second, 0); err != nil {
		return err
	}
	d, err = drainRelays(ctx, []relay.Store{store}, []message.Publisher{pub}, o.batch, o.retentionPending)
	if err != nil {
		return err
	}
	rateAfter := float64(o.retentionPending) / d.Seconds()

	vstart := time.Now()
	if _, err := db.ExecContext(ctx, `VACUUM `+table); err != nil {
		return err
	}
	vacuum := time.Since(vstart)
	vacuumed, _, err := tableSize(ctx, db, table)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "| %s | %.1f | %.0f | %.0f | %.2f | %s | %d → %d | %.0f | %d | %.0f | %.0f | %.1f |\n",
		layout, fill.Seconds(), rateFull, mb(before), res.Duration.Seconds(), removed, rowsBefore, rowsAfter, mb(after), dead, rateAfter, mb(vacuumed), vacuum.Seconds())
	return nil
}

// fillTimed inserts the events numbered from to to (inclusive), their event
// times spread evenly over span from start, in chunks of 250,000 rows; the
// events numbered up to publishedUpTo are inserted published (a second
// after their creation).
func fillTimed(ctx context.Context, db *sql.DB, o options, from, to int64, start time.Time, span time.Duration, publishedUpTo int64) error {
	shards := make([]int16, o.aggregates)
	for i := range shards {
		shards[i] = sqlstore.ShardOf("account", strconv.Itoa(i))
	}
	memo := strings.Repeat("x", max(o.payload-40, 1))
	total := to - from + 1
	// t(i): the event's time; the event id is a UUIDv7 of that
	// millisecond (version 7, variant 10, pseudo-random tail from md5).
	q := `INSERT INTO ` + sqlstore.DefaultTable + ` (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, occurred_at, created_at, published_at, shard)
		SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
			'bank.paid', 1, 'account', (i % $1)::text, '` + topic + `', '{"n":' || i || ',"memo":"' || $2 || '"}',
			ts, ts, CASE WHEN i <= $3 THEN ts + interval '1 second' END, ($4::smallint[])[i % $1 + 1]
		FROM (SELECT i, md5(i::text) AS h, ts, (extract(epoch FROM ts) * 1000)::int8 AS ms
			FROM (SELECT i, $5::timestamptz + (i - $6) * ($7::float8 / $8) * interval '1 microsecond' AS ts
				FROM generate_series($9::bigint, $10::bigint) i) g) x`
	const chunk = 250_000
	for lo := from; lo <= to; lo += chunk {
		hi := min(lo+chunk-1, to)
		if _, err := db.ExecContext(ctx, q, o.aggregates, memo, publishedUpTo, shards, start, from,
			float64(span.Microseconds()), float64(total), lo, hi); err != nil {
			return fmt.Errorf("fill events %d-%d: %w", lo, hi, err)
		}
	}
	return nil
}

// tableSize returns the outbox table's size in bytes, every partition with
// its indexes and TOAST, and its dead tuples as the statistics count them.
func tableSize(ctx context.Context, db *sql.DB, table string) (int64, int64, error) {
	var size, dead sql.NullInt64
	// pg_partition_tree lists a partitioned table and its partitions,
	// and nothing for a plain table.
	err := db.QueryRowContext(ctx, `WITH t AS (SELECT $1::regclass AS relid UNION SELECT relid FROM pg_partition_tree($1::regclass))
		SELECT sum(pg_total_relation_size(relid)), (SELECT sum(n_dead_tup) FROM pg_stat_user_tables s WHERE s.relid IN (SELECT relid FROM t))
		FROM t`, table).Scan(&size, &dead)
	if err != nil {
		return 0, 0, fmt.Errorf("size of %s: %w", table, err)
	}
	return size.Int64, dead.Int64, nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }

// ackPublisher acknowledges every message at once.
type ackPublisher struct{}

func (ackPublisher) Publish(string, ...*message.Message) error { return nil }
func (ackPublisher) Close() error                              { return nil }
