package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// dialect holds what differs between the supported databases.
type dialect struct {
	name string
}

func dialectOf(name string) (dialect, error) {
	switch name {
	case "postgres", "sqlite":
		return dialect{name: name}, nil
	}
	return dialect{}, fmt.Errorf("%w: %q (supported: postgres, sqlite)", ErrUnsupportedDialect, name)
}

// ph returns the n-th (1-based) bind placeholder.
func (d dialect) ph(n int) string {
	if d.name == "postgres" {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// pendingRow is one outbox row about to be written.
type pendingRow struct {
	env   runtime.Envelope
	topic string
}

const insertColumns = "event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, shard"

// insertCasts are the PostgreSQL types of insertColumns, for the VALUES list
// of an INSERT ... SELECT, whose parameters have no target column to take a
// type from.
var insertCasts = [...]string{"uuid", "text", "int4", "text", "text", "text", "text", "text", "timestamptz", "int2"}

// maxRowsPerInsert keeps a multi-row INSERT under every supported driver's
// bind-parameter limit (10 per row).
const maxRowsPerInsert = 1000

// insert writes rows through conn with one multi-row INSERT per chunk,
// skipping event ids that already have a row, and reports which ids it
// inserted.
//
// On PostgreSQL the INSERT first takes a transaction-scoped advisory lock per
// aggregate (sorted, so one statement never deadlocks with another), before
// any row gets its id: two transactions writing events of one aggregate are
// serialised from the first write to the commit, so the aggregate's ids
// follow commit order, whatever the write path (an aggregate saved under its
// row lock, or Enqueue, which takes none). The relay publishes in id order,
// hence in commit order. SQLite serialises every writing transaction anyway.
func (p *Plugin) insert(ctx context.Context, d dialect, conn gorm.ConnPool, rows []pendingRow) (map[uuid.UUID]bool, error) {
	maxBytes := p.cfg.MaxEventBytes
	for _, r := range rows {
		if maxBytes > 0 && len(r.env.Payload) > maxBytes {
			return nil, &EventTooLargeError{EventType: r.env.EventType, EventID: r.env.EventID, Size: len(r.env.Payload), Limit: maxBytes}
		}
	}
	inserted := make(map[uuid.UUID]bool, len(rows))
	for start := 0; start < len(rows); start += maxRowsPerInsert {
		chunk := rows[start:min(start+maxRowsPerInsert, len(rows))]
		q, args, err := p.insertSQL(d, chunk)
		if err != nil {
			return nil, err
		}
		res, err := conn.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("insert into %s: %w", p.cfg.Table, err)
		}
		for res.Next() {
			var s string
			if err := res.Scan(&s); err != nil {
				res.Close()
				return nil, fmt.Errorf("insert into %s: scan event id: %w", p.cfg.Table, err)
			}
			id, err := uuid.Parse(s)
			if err != nil {
				res.Close()
				return nil, fmt.Errorf("insert into %s: event id %q: %w", p.cfg.Table, s, err)
			}
			inserted[id] = true
		}
		if err := res.Close(); err != nil {
			return nil, fmt.Errorf("insert into %s: %w", p.cfg.Table, err)
		}
		if err := res.Err(); err != nil {
			return nil, fmt.Errorf("insert into %s: %w", p.cfg.Table, err)
		}
	}
	return inserted, nil
}

// insertSQL builds the INSERT of rows and its arguments.
func (p *Plugin) insertSQL(d dialect, rows []pendingRow) (string, []any, error) {
	var b strings.Builder
	args := make([]any, 0, 10*len(rows)+1)
	pg := d.name == "postgres"
	var locks []int32
	if pg && !p.noOrderLocks {
		// One lock per aggregate, in a stable order.
		seen := make(map[int32]bool, len(rows))
		for _, r := range rows {
			k := int32(aggregateHash(r.env.AggregateType, r.env.AggregateID))
			if !seen[k] {
				seen[k] = true
				locks = append(locks, k)
			}
		}
		slices.Sort(locks)
		// The first key is the table's oid, so outbox tables of other
		// schemas (or databases' other two-key advisory locks) do not share
		// the locks.
		args = append(args, locks)
		b.WriteString("WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(('" + p.cfg.Table +
			"'::regclass::oid::int8 - 2147483648)::int4, k) FROM unnest($1::int4[]) AS u(k) ORDER BY k) ")
	}
	b.WriteString("INSERT INTO " + p.cfg.Table + " (" + insertColumns + ") ")
	if pg {
		b.WriteString("SELECT * FROM (VALUES ")
	} else {
		b.WriteString("VALUES ")
	}
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j, cast := range insertCasts {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(d.ph(len(args) + j + 1))
			if pg {
				b.WriteString("::" + cast)
			}
		}
		b.WriteByte(')')
		var headers any
		if len(r.env.Headers) > 0 {
			h, err := json.Marshal(r.env.Headers)
			if err != nil {
				return "", nil, fmt.Errorf("marshal headers of event %s: %w", r.env.EventID, err)
			}
			headers = string(h)
		}
		args = append(args, r.env.EventID.String(), r.env.EventType, r.env.EventVersion,
			r.env.AggregateType, r.env.AggregateID, r.topic, string(r.env.Payload), headers,
			r.env.OccurredAt, ShardOf(r.env.AggregateType, r.env.AggregateID))
	}
	if pg {
		b.WriteString(") AS v")
		if !p.noOrderLocks {
			// The gate is evaluated once, before the first row is
			// produced and so before any row takes its id from the
			// sequence.
			b.WriteString(" WHERE (SELECT count(*) FROM l) > 0")
		}
	}
	b.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING event_id")
	return b.String(), args, nil
}
