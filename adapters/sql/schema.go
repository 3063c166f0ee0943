package sql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	watermillsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gooutbox/outbox/runtime"
)

// MaxTopicLength is the longest topic name in bytes: PostgreSQL truncates
// identifiers to 63 bytes, and the longest table name made from a topic is
// "watermill_offsets_" (18 bytes) followed by the topic. A longer topic would
// share its tables with every topic of the same first 45 bytes.
const MaxTopicLength = 63 - len("watermill_offsets_")

// MaxMessagesPerInsert is the most messages one INSERT statement carries:
// each message takes 3 of the 65,535 parameters a PostgreSQL statement may
// have.
const MaxMessagesPerInsert = 65535 / 3

// validTopic matches the topic names watermill-sql accepts.
var validTopic = regexp.MustCompile(`^[A-Za-z0-9\-$:._]+$`)

// validateTopic returns an error wrapping [ErrInvalidTopic] for a topic that
// cannot name a table.
func validateTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case len(topic) > MaxTopicLength:
		return fmt.Errorf("%w: %q is %d bytes, longer than %d", ErrInvalidTopic, topic, len(topic), MaxTopicLength)
	case !validTopic.MatchString(topic):
		return fmt.Errorf("%w: %q has a character outside A-Z a-z 0-9 - $ : . _", ErrInvalidTopic, topic)
	}
	return nil
}

// tables names one topic's tables, as quoted identifiers.
type tables struct {
	topic    string
	messages string // "watermill_<topic>": the messages, keyed by offset
	counter  string // "watermill_seq_<topic>": one row, the last offset given
	offsets  string // "watermill_offsets_<topic>": one row per consumer group
}

// tablesOf returns topic's tables. topic must be valid ([validateTopic]):
// its characters need no escaping inside double quotes.
func tablesOf(topic string) tables {
	return tables{
		topic:    topic,
		messages: `"watermill_` + topic + `"`,
		counter:  `"watermill_seq_` + topic + `"`,
		offsets:  `"watermill_offsets_` + topic + `"`,
	}
}

// lockKey is the advisory lock key under which tables are created or
// upgraded. CREATE TABLE IF NOT EXISTS is not safe against a concurrent
// one, and the lock is one for all topics, not one per topic: PostgreSQL
// truncates the index names it makes (<table>_pkey) to 63 bytes, and two
// topics whose names differ only past that point would collide on them.
const lockKey = "gooutbox/adapters/sql: tables"

// legacyLayout reports which of the topic's tables have the layout of
// watermill-sql's DefaultPostgreSQLSchema (a transaction_id column) and
// DefaultPostgreSQLOffsetsAdapter (last_processed_transaction_id).
func (t tables) legacyLayout(ctx context.Context, q querier) (messages, offsets bool, err error) {
	err = q.QueryRowContext(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'transaction_id' AND NOT attisdropped),
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'last_processed_transaction_id' AND NOT attisdropped)`,
		t.messages, t.offsets).Scan(&messages, &offsets)
	if err != nil {
		return false, false, fmt.Errorf("sql: read the layout of %s: %w", t.messages, err)
	}
	return messages, offsets, nil
}

// querier is what legacyLayout needs of a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// createStatements returns the statements that create the topic's tables
// if they do not exist: messages, group offsets and the counter. A counter
// row that is missing (a new topic, or a row deleted by hand) starts at the
// highest offset in the messages table or acked by a group, whichever is
// higher, so no offset a group has passed is given again, even after old
// messages were deleted.
func (t tables) createStatements() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t.messages + ` (
			"offset" BIGINT PRIMARY KEY,
			"uuid" VARCHAR(36) NOT NULL,
			"created_at" TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
			"payload" BYTEA,
			"metadata" JSON
		)`,
		`CREATE TABLE IF NOT EXISTS ` + t.offsets + ` (
			"consumer_group" VARCHAR(255) PRIMARY KEY,
			"offset_acked" BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE TABLE IF NOT EXISTS ` + t.counter + ` (
			"one" BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK ("one"),
			"last_offset" BIGINT NOT NULL
		)`,
		// HAVING NOT EXISTS, not only ON CONFLICT: an INSERT that meets
		// the row while a publisher's statement holds it would wait for
		// that statement's transaction.
		`INSERT INTO ` + t.counter + ` ("last_offset")
			SELECT GREATEST(COALESCE(MAX("offset"), 0), (SELECT COALESCE(MAX("offset_acked"), 0) FROM ` + t.offsets + `))
			FROM ` + t.messages + `
			HAVING NOT EXISTS (SELECT 1 FROM ` + t.counter + `)
			ON CONFLICT DO NOTHING`,
	}
}

// readCommitted is the isolation of the package's own transactions, whose
// statements must see what committed before them (the counter's last
// value, tables created meanwhile), whatever the server's default is.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// initialize checks that the topic's tables do not have watermill-sql's
// default layout ([ErrLegacySchema]) and, when create, creates the ones that
// do not exist, in one transaction under the advisory lock of [lockKey].
func initialize(ctx context.Context, db *sql.DB, t tables, create bool) error {
	if !create {
		return checkLayout(ctx, db, t)
	}
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return fmt.Errorf("sql: create the tables of %s: %w", t.topic, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
		return fmt.Errorf("sql: create the tables of %s: lock: %w", t.topic, err)
	}
	if err := checkLayout(ctx, tx, t); err != nil {
		return err
	}
	for _, stmt := range t.createStatements() {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sql: create the tables of %s: %w", t.topic, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sql: create the tables of %s: commit: %w", t.topic, err)
	}
	return nil
}

// checkLayout returns an error wrapping [ErrLegacySchema] when one of the
// topic's tables has watermill-sql's default layout.
func checkLayout(ctx context.Context, q querier, t tables) error {
	messages, offsets, err := t.legacyLayout(ctx, q)
	if err != nil {
		return err
	}
	table := t.messages
	switch {
	case messages:
	case offsets:
		table = t.offsets
	default:
		return nil
	}
	return fmt.Errorf("%w: %s has watermill-sql's default PostgreSQL layout (transaction ids); convert the topic's tables once with sql.Upgrade(ctx, db, %q), which keeps every message and every group's position",
		ErrLegacySchema, table, t.topic)
}

// insertQuery returns the statement that inserts msgs into the topic's
// messages table at the offsets after the counter's, advancing the counter
// by len(msgs) in the same statement. The counter row stays locked until
// the statement's transaction ends, so a topic's publishers take turns
// between their counter update and their commit, and offsets are given in
// commit order: a subscriber that sees offset n sees every offset below n.
func (t tables) insertQuery(msgs []*message.Message) (string, []any, error) {
	var b strings.Builder
	n := strconv.Itoa(len(msgs))
	b.WriteString(`WITH seq AS (UPDATE ` + t.counter + ` SET "last_offset" = "last_offset" + ` + n +
		` RETURNING "last_offset" - ` + n + ` AS base)
		INSERT INTO ` + t.messages + ` ("offset", "uuid", "payload", "metadata")
		SELECT seq.base + v.n, v.uuid, v.payload, v.metadata FROM seq, (VALUES `)
	args := make([]any, 0, 3*len(msgs))
	for i, msg := range msgs {
		metadata, err := json.Marshal(msg.Metadata)
		if err != nil {
			return "", nil, fmt.Errorf("sql: marshal the metadata of message %s: %w", msg.UUID, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		p := 3*i + 1
		fmt.Fprintf(&b, "($%d::varchar, $%d::bytea, $%d::json, %d)", p, p+1, p+2, i+1)
		args = append(args, msg.UUID, []byte(msg.Payload), metadata)
	}
	b.WriteString(`) AS v(uuid, payload, metadata, n)`)
	return b.String(), args, nil
}

// subscriberSchema is the watermillsql.SchemaAdapter of [Subscriber]: it
// reads a group's next messages by offset alone, with the group's offsets
// row locked FOR UPDATE so that the group's subscribers take turns. Tables
// are created by [initialize], not by watermill-sql.
type subscriberSchema struct {
	batch int
}

// subscriberOffsets is the watermillsql.OffsetsAdapter of [Subscriber]:
// one row per group, its last acked offset.
type subscriberOffsets struct{}

var (
	_ watermillsql.SchemaAdapter  = subscriberSchema{}
	_ watermillsql.OffsetsAdapter = subscriberOffsets{}
)

// errNotUsed is returned by the adapter methods watermill-sql's subscriber
// never calls.
var errNotUsed = errors.New("sql: not used by the subscriber")

// InsertQuery is not used: [Publisher] inserts on its own.
func (subscriberSchema) InsertQuery(watermillsql.InsertQueryParams) (watermillsql.Query, error) {
	return watermillsql.Query{}, errNotUsed
}

// SelectQuery returns the group's next batch after its acked offset,
// locking the group's offsets row.
func (s subscriberSchema) SelectQuery(p watermillsql.SelectQueryParams) (watermillsql.Query, error) {
	t := tablesOf(p.Topic)
	return watermillsql.Query{
		Query: `WITH acked AS (SELECT "offset_acked" FROM ` + t.offsets + ` WHERE "consumer_group" = $1 FOR UPDATE)
			SELECT "offset", "uuid", "payload", "metadata" FROM ` + t.messages + `
			WHERE "offset" > (SELECT "offset_acked" FROM acked)
			ORDER BY "offset" LIMIT ` + strconv.Itoa(s.batch),
		Args: []any{p.ConsumerGroup},
	}, nil
}

// UnmarshalMessage reads a row of SelectQuery.
func (subscriberSchema) UnmarshalMessage(p watermillsql.UnmarshalMessageParams) (watermillsql.Row, error) {
	var r watermillsql.Row
	if err := p.Row.Scan(&r.Offset, &r.UUID, &r.Payload, &r.Metadata); err != nil {
		return watermillsql.Row{}, fmt.Errorf("sql: scan a message row: %w", err)
	}
	msg := message.NewMessage(string(r.UUID), r.Payload)
	if r.Metadata != nil {
		if err := json.Unmarshal(r.Metadata, &msg.Metadata); err != nil {
			return watermillsql.Row{}, fmt.Errorf("sql: message at offset %d: metadata is not a JSON object of strings: %w", r.Offset, err)
		}
	}
	r.Msg = msg
	return r, nil
}

// SchemaInitializingQueries returns nothing: [initialize] creates the
// tables.
func (subscriberSchema) SchemaInitializingQueries(watermillsql.SchemaInitializingQueriesParams) ([]watermillsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel is READ COMMITTED: offsets are given in commit
// order, so any snapshot that sees an offset sees every lower one, and a
// subscriber waiting for its group's row lock reads the row as its holder
// left it instead of failing with a serialization error.
func (subscriberSchema) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelReadCommitted }

// SchemaInitializingQueries returns nothing: [initialize] creates the
// tables.
func (subscriberOffsets) SchemaInitializingQueries(watermillsql.OffsetsSchemaInitializingQueriesParams) ([]watermillsql.Query, error) {
	return nil, nil
}

// AckMessageQuery moves the group's offset to the last acked row.
func (subscriberOffsets) AckMessageQuery(p watermillsql.AckMessageQueryParams) (watermillsql.Query, error) {
	return watermillsql.Query{
		Query: `UPDATE ` + tablesOf(p.Topic).offsets + ` SET "offset_acked" = $1 WHERE "consumer_group" = $2`,
		Args:  []any{p.LastRow.Offset, p.ConsumerGroup},
	}, nil
}

// ConsumedMessageQuery returns no query: nothing is written per message.
func (subscriberOffsets) ConsumedMessageQuery(watermillsql.ConsumedMessageQueryParams) (watermillsql.Query, error) {
	return watermillsql.Query{}, nil
}

// NextOffsetQuery is not used: SelectQuery reads the offset itself.
func (subscriberOffsets) NextOffsetQuery(watermillsql.NextOffsetQueryParams) (watermillsql.Query, error) {
	return watermillsql.Query{}, errNotUsed
}

// BeforeSubscribingQueries adds the group's offsets row at offset 0 if it
// is missing: a new group reads the topic from its first message, and
// there is a row for SelectQuery to lock.
func (subscriberOffsets) BeforeSubscribingQueries(p watermillsql.BeforeSubscribingQueriesParams) ([]watermillsql.Query, error) {
	return []watermillsql.Query{{
		Query: `INSERT INTO ` + tablesOf(p.Topic).offsets + ` ("consumer_group", "offset_acked") VALUES ($1, 0) ON CONFLICT DO NOTHING`,
		Args:  []any{p.ConsumerGroup},
	}}, nil
}

// classify wraps err with [runtime.Permanent] when PostgreSQL refused the
// data itself, which no retry changes: SQLSTATE class 22 (data exception)
// and 54 (program limit exceeded).
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		switch pgErr.Code[:2] {
		case "22", "54":
			return runtime.Permanent(err)
		}
	}
	return err
}
