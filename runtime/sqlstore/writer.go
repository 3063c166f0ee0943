package sqlstore

import (
	"context"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// pendingRow is one outbox row about to be written.
type pendingRow struct {
	env   runtime.Envelope
	topic string
}

const insertColumns = "event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, shard"

// maxRowsPerInsert keeps a multi-row INSERT under every supported driver's
// bind-parameter limit (10 per row).
const maxRowsPerInsert = 1000

// insert writes rows through conn, skipping event ids that already have a
// row, and reports which ids it inserted. Each dialect keeps an aggregate's
// ids in commit order (see "Commit order" in the package documentation).
func (p *Plugin) insert(ctx context.Context, d dialect, conn gorm.ConnPool, rows []pendingRow) (map[uuid.UUID]bool, error) {
	maxBytes := p.cfg.MaxEventBytes
	for _, r := range rows {
		if maxBytes > 0 && len(r.env.Payload) > maxBytes {
			return nil, &EventTooLargeError{EventType: r.env.EventType, EventID: r.env.EventID, Size: len(r.env.Payload), Limit: maxBytes}
		}
	}
	return d.write(ctx, conn, p.cfg.Table, rows, !p.noOrderLocks)
}
