package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/gooutbox/outbox/runtime"
)

// plainOutboxDDL is the outbox of the baselines (the naive and the batched
// relay, and the writers that write their outbox row by hand): the columns
// a relay needs to publish by the wire contract, a unique event id and a
// partial index on the pending rows; nothing else.
var plainOutboxDDL = []string{
	`CREATE TABLE bench_outbox (
		id             BIGSERIAL PRIMARY KEY,
		event_id       UUID        NOT NULL,
		event_type     TEXT        NOT NULL,
		event_version  INTEGER     NOT NULL,
		aggregate_type TEXT        NOT NULL,
		aggregate_id   TEXT        NOT NULL,
		topic          TEXT        NOT NULL,
		payload        TEXT        NOT NULL,
		occurred_at    TIMESTAMPTZ NOT NULL,
		created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
		published_at   TIMESTAMPTZ
	)`,
	`CREATE UNIQUE INDEX bench_outbox_event_id ON bench_outbox (event_id)`,
	`CREATE INDEX bench_outbox_pending ON bench_outbox (id) WHERE published_at IS NULL`,
}

const plainInsert = `INSERT INTO bench_outbox (event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, occurred_at) VALUES `

// plainRow returns the INSERT arguments of one bench_outbox row.
func plainRow(env runtime.Envelope) []any {
	return []any{env.EventID, env.EventType, env.EventVersion, env.AggregateType, env.AggregateID, topic, string(env.Payload), env.OccurredAt}
}

// insertPlain writes one event to bench_outbox through exec (a transaction),
// as application code writing its outbox by hand would, and returns its id.
func insertPlain(ctx context.Context, exec func(query string, args ...any) error, evt runtime.Event, aggID string) (uuid.UUID, error) {
	env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), evt, "account", aggID)
	if err != nil {
		return uuid.UUID{}, err
	}
	return env.EventID, exec(plainInsert+`($1, $2, $3, $4, $5, $6, $7, $8)`, plainRow(env)...)
}

// prefillPlain empties bench_outbox and writes n events into it, 1,000 per
// multi-row INSERT, then settles the table.
func (b *bench) prefillPlain(ctx context.Context, n int) error {
	if _, err := b.sqlDB.ExecContext(ctx, `TRUNCATE bench_outbox`); err != nil {
		return err
	}
	for start := 0; start < n; start += 1000 {
		var q strings.Builder
		q.WriteString(plainInsert)
		var args []any
		for i := start; i < min(start+1000, n); i++ {
			env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), b.ev.event(i), "account", fmt.Sprint(i%b.o.aggregates))
			if err != nil {
				return err
			}
			if i > start {
				q.WriteString(", ")
			}
			k := len(args)
			fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d)", k+1, k+2, k+3, k+4, k+5, k+6, k+7, k+8)
			args = append(args, plainRow(env)...)
		}
		if _, err := b.sqlDB.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("prefill bench_outbox: %w", err)
		}
	}
	return settle(b.plain, "bench_outbox")
}

// drainNaive is the classic loop of the outbox articles: claim 100 rows FOR
// UPDATE SKIP LOCKED, then for each row a synchronous one-message produce
// (kafka-go, BatchSize 1) and an UPDATE, then commit; until nothing is left.
func drainNaive(ctx context.Context, db *sql.DB, brokers []string) (time.Duration, error) {
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Balancer: &kafkago.Hash{}, AllowAutoTopicCreation: true,
		RequiredAcks: kafkago.RequireAll, BatchSize: 1, BatchTimeout: time.Millisecond}
	defer w.Close()
	// Warm the writer up (connections, metadata) before the clock starts.
	if err := w.WriteMessages(ctx, kafkago.Message{Topic: warmTopic, Key: []byte("warm"), Value: []byte("{}")}); err != nil {
		return 0, fmt.Errorf("naive relay warm-up: %w", err)
	}
	start := time.Now()
	for {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, event_id, aggregate_id, payload FROM bench_outbox
			WHERE published_at IS NULL ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED`)
		if err != nil {
			tx.Rollback()
			return 0, err
		}
		type row struct {
			id      int64
			eventID string
			key     string
			payload []byte
		}
		var batch []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.eventID, &r.key, &r.payload); err != nil {
				rows.Close()
				tx.Rollback()
				return 0, err
			}
			batch = append(batch, r)
		}
		rows.Close()
		if len(batch) == 0 {
			tx.Rollback()
			return time.Since(start), nil
		}
		for _, r := range batch {
			if err := w.WriteMessages(ctx, kafkago.Message{Topic: topic, Key: []byte(r.key), Value: r.payload,
				Headers: []kafkago.Header{{Key: runtime.MetadataEventID, Value: []byte(r.eventID)}}}); err != nil {
				tx.Rollback()
				return 0, err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE bench_outbox SET published_at = now() WHERE id = $1`, r.id); err != nil {
				tx.Rollback()
				return 0, err
			}
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
}

// batchedRelay is the hand-tuned relay: in one transaction it claims up to
// batch rows FOR UPDATE SKIP LOCKED, publishes them with one Publish call per
// topic (adapters/kafka: one kafka-go WriteMessages), marks them with one
// UPDATE ... WHERE id = ANY($1) (or deletes them), and commits. It sleeps
// poll only after a claim that found nothing.
type batchedRelay struct {
	db     *sql.DB
	pub    message.Publisher
	batch  int
	delete bool
	// poll is the sleep after an empty claim; 0 makes run return at the
	// first empty claim (a drain).
	poll time.Duration
	sent atomic.Int64
}

// run relays until ctx is done (then it returns nil) or, when poll is 0,
// until the outbox is empty.
func (r *batchedRelay) run(ctx context.Context) error {
	for {
		n, err := r.cycle(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if n > 0 {
			continue
		}
		if r.poll == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.poll):
		}
	}
}

func (r *batchedRelay) cycle(ctx context.Context) (int, error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, event_id, event_type, event_version, aggregate_type, aggregate_id, topic, payload, occurred_at
		FROM bench_outbox WHERE published_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, r.batch)
	if err != nil {
		return 0, err
	}
	ids := make([]int64, 0, r.batch)
	var topics []string
	byTopic := map[string][]*message.Message{}
	for rows.Next() {
		var id int64
		var t string
		var env runtime.Envelope
		var payload string
		if err := rows.Scan(&id, &env.EventID, &env.EventType, &env.EventVersion, &env.AggregateType, &env.AggregateID, &t, &payload, &env.OccurredAt); err != nil {
			rows.Close()
			return 0, err
		}
		env.Payload = []byte(payload)
		m := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
		m.Metadata = env.Metadata()
		if _, ok := byTopic[t]; !ok {
			topics = append(topics, t)
		}
		byTopic[t] = append(byTopic[t], m)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, tx.Commit()
	}
	for _, t := range topics {
		if err := r.pub.Publish(t, byTopic[t]...); err != nil {
			return 0, fmt.Errorf("batched relay: publish: %w", err)
		}
	}
	mark := `UPDATE bench_outbox SET published_at = now() WHERE id = ANY($1)`
	if r.delete {
		mark = `DELETE FROM bench_outbox WHERE id = ANY($1)`
	}
	if _, err := tx.ExecContext(ctx, mark, ids); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	r.sent.Add(int64(len(ids)))
	return len(ids), nil
}

// Watermill's forwarder, wired as its documentation describes: the
// application publishes through forwarder.NewPublisher(sql.NewPublisher(tx))
// inside its transaction, so the enveloped message is a row of
// watermill-sql's table for the forwarder topic; the forwarder reads that
// table with a watermill-sql subscriber (consumer-group offsets, its
// default schema and offsets adapters) and publishes each message to its
// destination topic with the destination publisher (adapters/kafka here).

var (
	wmSchema  = wmsql.DefaultPostgreSQLSchema{}
	wmOffsets = wmsql.DefaultPostgreSQLOffsetsAdapter{}
)

// wmTopic returns a fresh forwarder topic: each run gets its own tables.
func (b *bench) wmTopic() string {
	b.wmRuns++
	return fmt.Sprintf("outbox_%d", b.wmRuns)
}

// wmSubscriber returns the forwarder's SQL subscriber, polling every poll
// (0: watermill-sql's default, 1s).
func (b *bench) wmSubscriber(poll time.Duration) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(b.sqlDB), wmsql.SubscriberConfig{
		SchemaAdapter:    wmSchema,
		OffsetsAdapter:   wmOffsets,
		InitializeSchema: true,
		PollInterval:     poll,
	}, watermill.NopLogger{})
}

// wmPublish publishes msgs through the forwarder's publisher in tx: what
// the application does in its business transaction.
func wmPublish(tx *sql.Tx, fwdTopic string, msgs ...*message.Message) error {
	sp, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: wmSchema}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	return forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: fwdTopic}).Publish(topic, msgs...)
}

// wmMessage returns the Watermill message of the i-th event, with the wire
// contract's metadata (so the destination publisher keys it by aggregate).
func (b *bench) wmMessage(ctx context.Context, evt runtime.Event, aggID string) (*message.Message, error) {
	env, err := runtime.NewEnvelope(ctx, runtime.NewEventID(), evt, "account", aggID)
	if err != nil {
		return nil, err
	}
	m := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
	m.Metadata = env.Metadata()
	return m, nil
}

// prefillWatermill creates the tables of a fresh forwarder topic and writes
// n events through the forwarder's publisher, 1,000 per transaction, then
// settles the table. It returns the topic.
func (b *bench) prefillWatermill(ctx context.Context, n int) (string, error) {
	fwdTopic := b.wmTopic()
	sub, err := b.wmSubscriber(0)
	if err != nil {
		return "", err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(fwdTopic); err != nil {
		return "", err
	}
	for start := 0; start < n; start += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			m, err := b.wmMessage(ctx, b.ev.event(i), fmt.Sprint(i%b.o.aggregates))
			if err != nil {
				return "", err
			}
			msgs = append(msgs, m)
		}
		tx, err := b.sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		if err := wmPublish(tx, fwdTopic, msgs...); err != nil {
			tx.Rollback()
			return "", fmt.Errorf("prefill watermill: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return "", err
		}
	}
	return fwdTopic, settle(b.plain, wmSchema.MessagesTable(fwdTopic))
}

// dropWatermill drops the tables of a forwarder topic.
func (b *bench) dropWatermill(ctx context.Context, fwdTopic string) error {
	_, err := b.sqlDB.ExecContext(ctx, `DROP TABLE IF EXISTS `+wmSchema.MessagesTable(fwdTopic)+`, `+wmOffsets.MessagesOffsetsTable(fwdTopic))
	return err
}

// startForwarder runs a forwarder from fwdTopic to pub, its SQL subscriber
// polling every poll (0: the default), until the returned stop is called.
func (b *bench) startForwarder(ctx context.Context, fwdTopic string, poll time.Duration, pub message.Publisher) (stop func() error, err error) {
	sub, err := b.wmSubscriber(poll)
	if err != nil {
		return nil, err
	}
	f, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: fwdTopic})
	if err != nil {
		sub.Close()
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- f.Run(ctx) }()
	select {
	case <-f.Running():
	case err := <-errc:
		sub.Close()
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	return func() error {
		err := f.Close()
		if rerr := <-errc; err == nil {
			err = rerr
		}
		if cerr := sub.Close(); err == nil {
			err = cerr
		}
		return err
	}, nil
}
