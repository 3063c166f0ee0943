package hooks

import (
	"context"
	"encoding/json"
	"fmt"
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

// pendingRow is one outbox row about to be written; rec is nil for rows from
// Enqueue.
type pendingRow struct {
	rec   *runtime.Recorder
	env   runtime.Envelope
	topic string
}

const insertColumns = "event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at"

// maxRowsPerInsert keeps a multi-row INSERT under every supported driver's
// bind-parameter limit (9 per row).
const maxRowsPerInsert = 1000

// insert writes rows through conn with one multi-row INSERT per chunk,
// skipping event ids that already have a row, and reports which ids it
// inserted.
func (p *Plugin) insert(ctx context.Context, d dialect, conn gorm.ConnPool, rows []pendingRow) (map[uuid.UUID]bool, error) {
	inserted := make(map[uuid.UUID]bool, len(rows))
	for start := 0; start < len(rows); start += maxRowsPerInsert {
		chunk := rows[start:min(start+maxRowsPerInsert, len(rows))]
		var b strings.Builder
		b.WriteString("INSERT INTO ")
		b.WriteString(p.cfg.Table)
		b.WriteString(" (" + insertColumns + ") VALUES ")
		args := make([]any, 0, 9*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for j := 1; j <= 9; j++ {
				if j > 1 {
					b.WriteString(", ")
				}
				b.WriteString(d.ph(len(args) + j))
			}
			b.WriteByte(')')
			var headers any
			if len(r.env.Headers) > 0 {
				h, err := json.Marshal(r.env.Headers)
				if err != nil {
					return nil, fmt.Errorf("marshal headers of event %s: %w", r.env.EventID, err)
				}
				headers = string(h)
			}
			args = append(args, r.env.EventID.String(), r.env.EventType, r.env.EventVersion,
				r.env.AggregateType, r.env.AggregateID, r.topic, string(r.env.Payload), headers,
				r.env.OccurredAt)
		}
		b.WriteString(" ON CONFLICT (event_id) DO NOTHING RETURNING event_id")
		res, err := conn.QueryContext(ctx, b.String(), args...)
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
