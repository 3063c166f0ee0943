package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/gooutbox/outbox/runtime"
)

// Row is one outbox row about to be written: the event's envelope and its
// destination topic.
type Row struct {
	Envelope runtime.Envelope
	Topic    string

	// NewAggregate reports that the event's aggregate was created by the
	// writing transaction with an identifier the database generated (an
	// INSERT that took its primary key from a sequence or a column
	// default), so no other transaction can write events of that aggregate
	// before this one ends. Such a row needs no commit-order lock (see
	// "Commit order" in the package documentation), and [Writer.Write]
	// takes none for it. Its event cannot have a row yet either: on
	// PostgreSQL a write of only such rows leaves out the deduplication on
	// the event id, and an event id that has a row fails the write (a
	// unique violation) rather than be skipped. Setting it for any other
	// row can publish the aggregate's events out of order. Package hooks
	// sets it for a GORM Create that got its primary key from the database.
	NewAggregate bool
}

// needsOrderLock reports whether r's aggregate needs the commit-order
// lock: every row but those of a new aggregate.
func needsOrderLock(r Row) bool { return !r.NewAggregate }

const insertColumns = "event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, headers, occurred_at, shard"

// maxRowsPerInsert keeps a multi-row INSERT under every supported driver's
// bind-parameter limit (10 per row).
const maxRowsPerInsert = 1000

// WriterConfig configures a [Writer]. The zero value is the configuration
// to use.
type WriterConfig struct {
	// SkipOrderLocks leaves out the per-aggregate commit-order locks (see
	// "Commit order" in the package documentation). It exists to measure
	// what the locks cost; leaving it false is what keeps each aggregate's
	// ids in commit order. Default: false.
	SkipOrderLocks bool

	// MaxEventBytes is the largest event payload (its JSON) Write accepts:
	// a Write with a larger one fails with an [*EventTooLargeError] and
	// writes nothing, rather than leave the relay an event the broker
	// refuses for good (it would be parked, holding its aggregate back).
	// Keep it below the broker's message limit. Negative means no limit.
	// Default: 1,000,000 ([DefaultMaxEventBytes]), as hooks.Config's.
	MaxEventBytes int

	// ValidateTopic, when set, checks each row's topic before anything is
	// written: a topic it refuses fails the Write with a [*TopicError]
	// naming the event, rather than leave the relay a message no broker
	// will take. Pass the broker's own rules: adapters/kafka's
	// ValidateTopic for Kafka. Default: nil, no check.
	ValidateTopic func(topic string) error

	// LogicalMessages, when not empty, makes Write emit each event as a
	// transactional logical decoding message with this prefix
	// (PostgreSQL's pg_logical_emit_message(true, prefix, content), the
	// content from [EncodeLogicalMessage]) instead of inserting an outbox
	// row: the change-data-capture relay in messages mode (package
	// runtime/sqlstore/pgcdc, Mode Messages, with the same prefix:
	// pgcdc.DefaultMessagePrefix, "gooutbox") reads them from the
	// transaction log, and no outbox row exists. The messages commit or
	// roll back with the transaction, in commit order like rows; without
	// rows there is nothing to retain, replay, show on the dashboard or
	// list in the operator command, and no de-duplication of event ids
	// (Write reports every event as written). PostgreSQL only: NewWriter
	// returns an error wrapping [ErrUnsupportedDialect] for the others.
	// Default: "" (rows).
	LogicalMessages string
}

// TopicError is the error of a [Writer.Write] with a row whose topic
// [WriterConfig.ValidateTopic] refused; nothing was written.
type TopicError struct {
	// Topic is the refused topic; EventType and EventID name the event.
	Topic     string
	EventType string
	EventID   uuid.UUID
	// Err is ValidateTopic's reason.
	Err error
}

// Error names the event, the topic and the reason.
func (e *TopicError) Error() string {
	return fmt.Sprintf("sqlstore: event %s (%s): topic %q: %v", e.EventType, e.EventID, e.Topic, e.Err)
}

// Unwrap returns the reason.
func (e *TopicError) Unwrap() error { return e.Err }

// DefaultMaxEventBytes is the default of [WriterConfig.MaxEventBytes]:
// under Kafka's default message limit with room for the headers.
const DefaultMaxEventBytes = 1_000_000

// EventTooLargeError is the error of a [Writer.Write] with an event
// payload larger than [WriterConfig.MaxEventBytes]; nothing was written.
type EventTooLargeError struct {
	// EventType and EventID name the event.
	EventType string
	EventID   uuid.UUID
	// Size is the payload's size and Limit the configured maximum, in bytes.
	Size, Limit int
}

// Error names the event and both sizes.
func (e *EventTooLargeError) Error() string {
	return fmt.Sprintf("sqlstore: event %s (%s) is %d bytes, more than MaxEventBytes %d", e.EventType, e.EventID, e.Size, e.Limit)
}

// Writer inserts outbox rows into one table of one dialect, deduplicating
// on the event id and keeping each aggregate's ids in commit order. It is
// the write path of the GORM plugin (package hooks) and of any other code
// that writes outbox rows inside its business transaction. A Writer is safe
// for concurrent use.
type Writer struct {
	d          dialect
	table      string
	orderLocks bool
	maxBytes   int // MaxEventBytes; negative: no limit
	topicOK    func(string) error
	wake       *writerWake // PostgreSQL: notifies a waiting relay; nil elsewhere
	// prefix is WriterConfig.LogicalMessages: emit messages, not rows.
	prefix string
}

// NewWriter returns a writer of table (empty: [DefaultTable]) in dialect d.
// It returns an error wrapping [ErrInvalidTable] or [ErrUnsupportedDialect].
func NewWriter(d Dialect, table string, cfg WriterConfig) (*Writer, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := CheckTable(table, MaxOutboxTableName); err != nil {
		return nil, err
	}
	impl, err := sqlOf(d)
	if err != nil {
		return nil, err
	}
	w := &Writer{d: impl, table: table, orderLocks: !cfg.SkipOrderLocks, maxBytes: cmp.Or(cfg.MaxEventBytes, DefaultMaxEventBytes), topicOK: cfg.ValidateTopic}
	if cfg.LogicalMessages != "" {
		if d != Postgres {
			return nil, fmt.Errorf("%w: logical decoding messages (WriterConfig.LogicalMessages) need PostgreSQL, not %s", ErrUnsupportedDialect, d)
		}
		w.prefix = cfg.LogicalMessages
		return w, nil
	}
	if d == Postgres {
		w.wake = newWriterWake(table)
	}
	return w, nil
}

// Write inserts rows through q, skipping event ids that already have a
// row, and reports which ids it inserted. A payload larger than
// [WriterConfig.MaxEventBytes] fails it with an [*EventTooLargeError],
// and a topic [WriterConfig.ValidateTopic] refuses with a [*TopicError],
// before anything is written. Pass the business transaction (a
// Tx, or a GORM statement's connection pool) so that the rows commit
// with it.
//
// Before any row gets its id, Write takes the commit-order lock of each
// aggregate of rows, held until the transaction ends (see "Commit order" in
// the package documentation), but for rows of a new aggregate
// ([Row.NewAggregate]). On PostgreSQL, while a relay waits for a wake-up
// ([Store.RequestWake]), Write also sends a NOTIFY through q, delivered
// when the transaction commits; it learns of a request within 100 ms (one
// short query per 100 ms per Writer). On MySQL that lock needs a transaction: when
// q is not one (a driver's executor of a pool or a session, which is a
// [Beginner]), Write runs the insert in a transaction of its own, begun on
// q.
func (w *Writer) Write(ctx context.Context, q Executor, rows []Row) (inserted map[uuid.UUID]bool, err error) {
	if len(rows) == 0 {
		return map[uuid.UUID]bool{}, nil
	}
	if w.maxBytes >= 0 {
		for _, r := range rows {
			if len(r.Envelope.Payload) > w.maxBytes {
				return nil, &EventTooLargeError{EventType: r.Envelope.EventType, EventID: r.Envelope.EventID, Size: len(r.Envelope.Payload), Limit: w.maxBytes}
			}
		}
	}
	if w.topicOK != nil {
		for _, r := range rows {
			if err := w.topicOK(r.Topic); err != nil {
				return nil, &TopicError{Topic: r.Topic, EventType: r.Envelope.EventType, EventID: r.Envelope.EventID, Err: err}
			}
		}
	}
	if w.prefix != "" {
		return w.emit(ctx, q, rows)
	}
	inserted, err = w.d.write(ctx, q, w.table, rows, w.orderLocks)
	if err != nil || len(inserted) == 0 || w.wake == nil {
		return inserted, err
	}
	if err := w.wake.afterInsert(ctx, q); err != nil {
		return nil, fmt.Errorf("insert into %s: %w", w.table, err)
	}
	return inserted, nil
}

// emit writes rows as logical decoding messages (WriterConfig.LogicalMessages),
// in their order, in one statement.
func (w *Writer) emit(ctx context.Context, q Executor, rows []Row) (map[uuid.UUID]bool, error) {
	var stmt strings.Builder
	stmt.WriteString(`SELECT pg_logical_emit_message(true, $1::text, v.m) FROM (VALUES `)
	args := make([]any, 0, len(rows)+1)
	args = append(args, w.prefix)
	now := time.Now().UTC()
	written := make(map[uuid.UUID]bool, len(rows))
	for i, r := range rows {
		h, err := EncodeHeaders(r.Envelope.Headers)
		if err != nil {
			return nil, err
		}
		content, err := EncodeLogicalMessage(RowValues{
			EventID: r.Envelope.EventID.String(), EventType: r.Envelope.EventType, EventVersion: r.Envelope.EventVersion,
			AggregateType: r.Envelope.AggregateType, AggregateID: r.Envelope.AggregateID, Topic: r.Topic,
			Payload: r.Envelope.Payload, Headers: h, OccurredAt: r.Envelope.OccurredAt, CreatedAt: now,
		})
		if err != nil {
			return nil, err
		}
		if i > 0 {
			stmt.WriteString(", ")
		}
		fmt.Fprintf(&stmt, "($%d::text)", i+2)
		args = append(args, string(content))
		written[r.Envelope.EventID] = true
	}
	stmt.WriteString(`) AS v (m)`)
	if _, err := q.ExecContext(ctx, stmt.String(), args...); err != nil {
		return nil, fmt.Errorf("sqlstore: emit logical decoding messages: %w", err)
	}
	return written, nil
}
