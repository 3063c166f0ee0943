package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// DeadLetterDefaultTable is the default dead-letter table: the messages
// consumers gave up on (see runtime/consumer's DeadLetterTable), kept in
// the consumer's database where an operator lists, shows, re-drives and
// discards them.
const DeadLetterDefaultTable = "outbox_dead_letters"

// DeadLetterDDL returns the idempotent statements that create the
// dead-letter table (empty: [DeadLetterDefaultTable]) and its index in
// dialect d, for users who run their own migrations. It returns an error
// wrapping [ErrInvalidTable] or [ErrUnsupportedDialect].
//
// The table has one row per dead-lettered delivery: id (ascending in the
// order they were written), the consumer's name, the message's UUID, the
// topic it was consumed from, why it was given up on (reason, error,
// attempts), its payload and metadata as they arrived, when, and when an
// operator re-drove it (NULL until then).
func DeadLetterDDL(d Dialect, table string) ([]string, error) {
	if table == "" {
		table = DeadLetterDefaultTable
	}
	if err := CheckTable(table, MaxInboxTableName); err != nil {
		return nil, err
	}
	if _, err := sqlOf(d); err != nil {
		return nil, err
	}
	base := baseName(table)
	switch d {
	case Postgres:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id               BIGSERIAL   PRIMARY KEY,
	consumer         TEXT        NOT NULL,
	message_uuid     TEXT        NOT NULL,
	topic            TEXT        NOT NULL,
	reason           TEXT        NOT NULL,
	error            TEXT        NOT NULL,
	attempts         INTEGER     NOT NULL,
	payload          BYTEA       NOT NULL,
	metadata         TEXT        NOT NULL,
	dead_lettered_at TIMESTAMPTZ NOT NULL,
	redriven_at      TIMESTAMPTZ
)`,
			`CREATE INDEX IF NOT EXISTS ` + base + `_consumer ON ` + table + ` (consumer, id)`,
		}, nil
	case MySQL:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	consumer         VARCHAR(255) NOT NULL,
	message_uuid     VARCHAR(255) NOT NULL,
	topic            VARCHAR(255) NOT NULL,
	reason           VARCHAR(64)  NOT NULL,
	error            MEDIUMTEXT   NOT NULL,
	attempts         INT          NOT NULL,
	payload          LONGBLOB     NOT NULL,
	metadata         LONGTEXT     NOT NULL,
	dead_lettered_at DATETIME(6)  NOT NULL,
	redriven_at      DATETIME(6)  NULL,
	KEY consumer (consumer, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		}, nil
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
	id               INTEGER  PRIMARY KEY AUTOINCREMENT,
	consumer         TEXT     NOT NULL,
	message_uuid     TEXT     NOT NULL,
	topic            TEXT     NOT NULL,
	reason           TEXT     NOT NULL,
	error            TEXT     NOT NULL,
	attempts         INTEGER  NOT NULL,
	payload          BLOB     NOT NULL,
	metadata         TEXT     NOT NULL,
	dead_lettered_at DATETIME NOT NULL,
	redriven_at      DATETIME
)`,
		`CREATE INDEX IF NOT EXISTS ` + qualify(table, base+`_consumer`) + ` ON ` + base + ` (consumer, id)`,
	}, nil
}

// DeadLetter is one row of the dead-letter table.
type DeadLetter struct {
	// ID is the row's id, ascending in the order the rows were written.
	ID int64
	// Consumer is the name of the consumer that gave up on the message.
	Consumer string
	// MessageUUID is the broker message's UUID (Watermill's).
	MessageUUID string
	// Topic is the topic the message was consumed from: a re-drive
	// publishes it there again.
	Topic string
	// Reason says why the consumer gave up on it (its consumer.Reason:
	// "handler", "decode", "unknown_version", ...), Error what failed.
	Reason, Error string
	// Attempts is how many times the consumer tried to apply it.
	Attempts int
	// Payload and Metadata are the message's as it arrived.
	Payload  []byte
	Metadata map[string]string
	// DeadLetteredAt is when the consumer gave up on it.
	DeadLetteredAt time.Time
	// RedrivenAt is when an operator last re-drove it; zero until then.
	RedrivenAt time.Time
}

// DeadLetterQuery selects rows of the dead-letter table: the zero value
// is the first [DefaultQueryLimit] rows not re-driven yet, of every
// consumer, oldest first.
type DeadLetterQuery struct {
	// Consumer keeps the rows of one consumer; "" keeps every consumer's.
	Consumer string
	// Topic keeps the rows of messages consumed from one topic.
	Topic string
	// Redriven includes the rows re-driven already.
	Redriven bool
	// AfterID keeps rows with a larger id: the last id of the previous
	// page.
	AfterID int64
	// Limit is the most rows returned, at most [MaxQueryLimit]; 0 means
	// [DefaultQueryLimit].
	Limit int
}

// DeadLetters reads and writes a dead-letter table in one dialect. It is
// safe for concurrent use.
type DeadLetters struct {
	db      Executor
	dialect dialect
	table   string
}

// NewDeadLetters returns the dead-letter table (empty:
// [DeadLetterDefaultTable]) of db, in dialect d (empty: db's, see
// [DialectOf]). It returns an error wrapping [ErrInvalidTable] or
// [ErrUnsupportedDialect]. Create the table with [Migrate]
// (Schema.DeadLetters) or [DeadLetterDDL].
func NewDeadLetters(db DB, d Dialect, table string) (*DeadLetters, error) {
	if nilDB(db) {
		return nil, errNilDB
	}
	if table == "" {
		table = DeadLetterDefaultTable
	}
	if err := CheckTable(table, MaxInboxTableName); err != nil {
		return nil, err
	}
	if d == "" {
		var err error
		if d, err = db.Dialect(); err != nil {
			return nil, err
		}
	}
	dl, err := sqlOf(d)
	if err != nil {
		return nil, err
	}
	return &DeadLetters{db: db, dialect: dl, table: table}, nil
}

// MaxDeadLetterError is the longest error text [DeadLetters.Add] keeps, in
// bytes; a longer one is cut (at a character boundary), so that no error
// text, however long, fails the write and with it the consumer's
// dead-lettering.
const MaxDeadLetterError = 16 << 10

// truncateUTF8 cuts s to at most n bytes, at a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Add writes a row for dl (its ID and RedrivenAt are ignored; its Error is
// cut to [MaxDeadLetterError] bytes).
func (t *DeadLetters) Add(ctx context.Context, dl DeadLetter) error {
	meta, err := json.Marshal(dl.Metadata)
	if err != nil {
		return fmt.Errorf("sqlstore: dead letter %s: metadata: %w", dl.MessageUUID, err)
	}
	if dl.Payload == nil {
		dl.Payload = []byte{}
	}
	dl.Error = truncateUTF8(dl.Error, MaxDeadLetterError)
	at := dl.DeadLetteredAt
	if at.IsZero() {
		at = time.Now()
	}
	phs := make([]string, 9)
	for i := range phs {
		phs[i] = t.dialect.ph(i + 1)
	}
	_, err = t.db.ExecContext(ctx, `INSERT INTO `+t.table+` (consumer, message_uuid, topic, reason, error, attempts, payload, metadata, dead_lettered_at)
		VALUES (`+strings.Join(phs, ", ")+`)`,
		dl.Consumer, dl.MessageUUID, dl.Topic, dl.Reason, dl.Error, dl.Attempts, dl.Payload, string(meta), at.UTC())
	if err != nil {
		return fmt.Errorf("sqlstore: dead letter %s of consumer %q: %w", dl.MessageUUID, dl.Consumer, err)
	}
	return nil
}

const deadLetterColumns = `id, consumer, message_uuid, topic, reason, error, attempts, payload, metadata, dead_lettered_at, redriven_at`

// List returns the rows q selects, in id order.
func (t *DeadLetters) List(ctx context.Context, q DeadLetterQuery) ([]DeadLetter, error) {
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultQueryLimit
	case limit < 0 || limit > MaxQueryLimit:
		return nil, fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalidQuery, limit, MaxQueryLimit)
	}
	if q.AfterID < 0 {
		return nil, fmt.Errorf("%w: after id %d is negative", ErrInvalidQuery, q.AfterID)
	}
	var conds []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, fmt.Sprintf(cond, t.dialect.ph(len(args))))
	}
	add("id > %s", q.AfterID)
	if q.Consumer != "" {
		add("consumer = %s", q.Consumer)
	}
	if q.Topic != "" {
		add("topic = %s", q.Topic)
	}
	if !q.Redriven {
		conds = append(conds, "redriven_at IS NULL")
	}
	args = append(args, limit)
	rows, err := t.db.QueryContext(ctx, `SELECT `+deadLetterColumns+` FROM `+t.table+` WHERE `+strings.Join(conds, " AND ")+
		` ORDER BY id LIMIT `+t.dialect.ph(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: dead letters: %w", err)
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		dl, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: dead letters: %w", err)
		}
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: dead letters: %w", err)
	}
	return out, nil
}

// Get returns the row with the given id, or an error wrapping
// [ErrNotFound].
func (t *DeadLetters) Get(ctx context.Context, id int64) (DeadLetter, error) {
	rows, err := t.db.QueryContext(ctx, `SELECT `+deadLetterColumns+` FROM `+t.table+` WHERE id = `+t.dialect.ph(1), id)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("sqlstore: dead letter %d: %w", id, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return DeadLetter{}, fmt.Errorf("sqlstore: dead letter %d: %w", id, err)
		}
		return DeadLetter{}, fmt.Errorf("sqlstore: dead letter %d: %w", id, ErrNotFound)
	}
	dl, err := scanDeadLetter(rows)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("sqlstore: dead letter %d: %w", id, err)
	}
	return dl, nil
}

// MarkRedriven records that the row with the given id was re-driven now.
// It returns an error wrapping [ErrNotFound] when there is no such row.
func (t *DeadLetters) MarkRedriven(ctx context.Context, id int64) error {
	res, err := t.db.ExecContext(ctx, `UPDATE `+t.table+` SET redriven_at = `+t.dialect.ph(1)+` WHERE id = `+t.dialect.ph(2), time.Now().UTC(), id)
	if err != nil {
		return fmt.Errorf("sqlstore: dead letter %d: mark re-driven: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("sqlstore: dead letter %d: mark re-driven: %w", id, ErrNotFound)
	}
	return nil
}

// Delete deletes the rows with the given ids and returns how many it
// deleted.
func (t *DeadLetters) Delete(ctx context.Context, ids ...int64) (int64, error) {
	n, err := execIDs(ctx, t.db, t.dialect, `DELETE FROM `+t.table+` WHERE id IN (%s)`, ids)
	if err != nil {
		return n, fmt.Errorf("sqlstore: delete dead letters: %w", err)
	}
	return n, nil
}

// DeadLetterCount is one consumer's rows in the dead-letter table.
type DeadLetterCount struct {
	Consumer string
	// Waiting counts the rows not re-driven, Redriven the others.
	Waiting, Redriven int64
	// Oldest is when the oldest row not re-driven was written (zero when
	// none waits).
	Oldest time.Time
}

// Counts returns each consumer's rows, by consumer name.
func (t *DeadLetters) Counts(ctx context.Context) ([]DeadLetterCount, error) {
	rows, err := t.db.QueryContext(ctx, `SELECT consumer,
		sum(CASE WHEN redriven_at IS NULL THEN 1 ELSE 0 END),
		sum(CASE WHEN redriven_at IS NULL THEN 0 ELSE 1 END),
		min(CASE WHEN redriven_at IS NULL THEN id END)
		FROM `+t.table+` GROUP BY consumer ORDER BY consumer`)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: count dead letters: %w", err)
	}
	type count struct {
		DeadLetterCount
		oldestID sql.NullInt64
	}
	var cs []count
	for rows.Next() {
		var c count
		if err := rows.Scan(&c.Consumer, &c.Waiting, &c.Redriven, &c.oldestID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlstore: count dead letters: %w", err)
		}
		cs = append(cs, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlstore: count dead letters: %w", err)
	}
	out := make([]DeadLetterCount, len(cs))
	for i, c := range cs {
		if c.oldestID.Valid {
			// Ids ascend in the order rows were written: the oldest
			// waiting row is the one with the smallest id (its time
			// alone is read, not its payload).
			var at sql.NullTime
			err := t.db.QueryRowContext(ctx, `SELECT dead_lettered_at FROM `+t.table+` WHERE id = `+t.dialect.ph(1), c.oldestID.Int64).Scan(&at)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("sqlstore: count dead letters: %w", err)
			}
			if at.Valid {
				c.Oldest = at.Time.UTC()
			}
		}
		out[i] = c.DeadLetterCount
	}
	return out, nil
}

// scanDeadLetter reads one row of deadLetterColumns.
func scanDeadLetter(rows Rows) (DeadLetter, error) {
	var (
		dl       DeadLetter
		meta     string
		at       sql.NullTime
		redriven sql.NullTime
	)
	if err := rows.Scan(&dl.ID, &dl.Consumer, &dl.MessageUUID, &dl.Topic, &dl.Reason, &dl.Error, &dl.Attempts,
		&dl.Payload, &meta, &at, &redriven); err != nil {
		return DeadLetter{}, fmt.Errorf("scan: %w", err)
	}
	if meta != "" {
		if err := json.Unmarshal([]byte(meta), &dl.Metadata); err != nil {
			return DeadLetter{}, fmt.Errorf("row %d: metadata: %w", dl.ID, err)
		}
	}
	if at.Valid {
		dl.DeadLetteredAt = at.Time.UTC()
	}
	if redriven.Valid {
		dl.RedrivenAt = redriven.Time.UTC()
	}
	return dl, nil
}
