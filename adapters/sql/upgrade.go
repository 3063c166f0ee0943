package sql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// CreateStatements returns the statements that create topic's tables if
// they do not exist, for migrations run with
// [PublisherConfig.SkipSchemaInitialization] and
// [SubscriberConfig.SkipSchemaInitialization]: the advisory lock the
// package creates tables under, a check that fails when the topic's tables
// have watermill-sql's default layout (run [Upgrade] instead), then the
// messages table, the consumer groups' offsets and the offset counter (one
// row). Run them in order, in one transaction.
func CreateStatements(topic string) ([]string, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	t := tablesOf(topic)
	// A DO body in single quotes: a topic may hold '$' but never a quote.
	q := func(s string) string { return strings.ReplaceAll(s, "'", "''") }
	guard := `DO '` + q(`BEGIN
		IF EXISTS (SELECT 1 FROM pg_attribute
			WHERE attrelid IN (to_regclass('`+t.messages+`'), to_regclass('`+t.offsets+`'))
			AND attname IN ('transaction_id', 'last_processed_transaction_id') AND NOT attisdropped) THEN
			RAISE EXCEPTION 'the tables of topic `+topic+` have watermill-sql''s default layout: convert them with sql.Upgrade';
		END IF;
	END`) + `'`
	return append([]string{`SELECT pg_advisory_xact_lock(hashtext('` + lockKey + `'))`, guard}, t.createStatements()...), nil
}

// Upgrade converts topic's tables from the layout of watermill-sql's
// DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter (which this
// package used before it gave offsets in commit order, and which plain
// watermill-sql programs create) to this package's, in one transaction:
//
//   - every message keeps its place in the order those subscribers read
//     (transaction_id, offset) and is renumbered 1, 2, ... in that order;
//   - every consumer group's position becomes the number of messages it had
//     read, so it goes on with the first message it had not;
//   - a JSON payload column becomes BYTEA (the JSON text's bytes);
//   - the offset counter starts after the last message.
//
// It locks both tables (ACCESS EXCLUSIVE) until it commits, so it waits
// for the publishers and subscribers at work and they wait for it, and it
// holds the advisory lock under which this package creates any topic's
// tables, so a first Publish or a Subscribe to any topic waits for it too.
// It rewrites the messages table (twice when the payload column is JSON).
// Stop the programs of the old layout first: a publisher of the old layout
// fails on the new one (its INSERT names transaction_id) and keeps its
// messages to retry; it loses none. Tables already of the new layout, or
// missing, are left as they are (Upgrade may run again); one table of each
// layout is converted only while no group has read anything, and refused
// otherwise.
func Upgrade(ctx context.Context, db *sql.DB, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	if err := checkDriver(db); err != nil {
		return err
	}
	t := tablesOf(topic)
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return fmt.Errorf("sql: upgrade %s: %w", topic, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	exec := func(stmt string) error {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sql: upgrade %s: %w (statement: %s)", topic, err, stmt)
		}
		return nil
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, lockKey); err != nil {
		return fmt.Errorf("sql: upgrade %s: lock: %w", topic, err)
	}
	// Lock the tables that exist before reading their layout, so that no
	// program of the old layout changes them in between.
	var messagesExist, offsetsExist bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, t.messages, t.offsets).Scan(&messagesExist, &offsetsExist); err != nil {
		return fmt.Errorf("sql: upgrade %s: %w", topic, err)
	}
	for _, l := range []struct {
		table  string
		exists bool
	}{{t.messages, messagesExist}, {t.offsets, offsetsExist}} {
		if l.exists {
			if err := exec(`LOCK TABLE ` + l.table + ` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
		}
	}
	legacyMessages, legacyOffsets, err := t.legacyLayout(ctx, tx)
	if err != nil {
		return err
	}
	if !legacyMessages && !legacyOffsets {
		return nil
	}
	if legacyMessages != legacyOffsets && offsetsExist {
		// One table of each layout (a program of the other layout created
		// one of them): the groups' positions can be kept only when no
		// group has read anything yet.
		var read bool
		cond := `"offset_acked" <> 0`
		if legacyOffsets {
			cond = `COALESCE("offset_acked", 0) <> 0 OR "last_processed_transaction_id" <> '0'`
		}
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+t.offsets+` WHERE `+cond+`)`).Scan(&read); err != nil {
			return fmt.Errorf("sql: upgrade %s: %w", topic, err)
		}
		if read {
			return fmt.Errorf("sql: upgrade %s: %s and %s have different layouts and some group has read the topic, so its position cannot be converted", topic, t.messages, t.offsets)
		}
	}
	var stmts []string
	if legacyMessages {
		var payloadIsBytea bool
		if err := tx.QueryRowContext(ctx, `SELECT atttypid = 'bytea'::regtype FROM pg_attribute
			WHERE attrelid = to_regclass($1) AND attname = 'payload' AND NOT attisdropped`, t.messages).Scan(&payloadIsBytea); err != nil {
			return fmt.Errorf("sql: upgrade %s: read the payload column of %s: %w", topic, t.messages, err)
		}
		stmts = append(stmts,
			`ALTER TABLE `+t.messages+` ADD COLUMN "gooutbox_offset" BIGINT`,
			`UPDATE `+t.messages+` m SET "gooutbox_offset" = r.n
				FROM (SELECT "transaction_id", "offset", row_number() OVER (ORDER BY "transaction_id", "offset") AS n FROM `+t.messages+`) r
				WHERE m."transaction_id" = r."transaction_id" AND m."offset" = r."offset"`,
		)
		if legacyOffsets {
			// The old subscribers had read every row up to
			// (last_processed_transaction_id, offset_acked) in their
			// order, and only rows of ended transactions.
			stmts = append(stmts, `UPDATE `+t.offsets+` o SET "offset_acked" = (SELECT count(*) FROM `+t.messages+` m
				WHERE (m."transaction_id", m."offset") <= (o."last_processed_transaction_id", COALESCE(o."offset_acked", 0)))`)
		}
		// Dropping the columns drops the old primary key and the offset's
		// sequence with them.
		stmts = append(stmts,
			`ALTER TABLE `+t.messages+` DROP COLUMN "transaction_id", DROP COLUMN "offset"`,
			`ALTER TABLE `+t.messages+` RENAME COLUMN "gooutbox_offset" TO "offset"`,
			`ALTER TABLE `+t.messages+` ADD PRIMARY KEY ("offset")`,
		)
		if !payloadIsBytea {
			stmts = append(stmts, `ALTER TABLE `+t.messages+` ALTER COLUMN "payload" TYPE BYTEA USING convert_to("payload"::text, 'UTF8')`)
		}
	}
	if legacyOffsets {
		stmts = append(stmts,
			`UPDATE `+t.offsets+` SET "offset_acked" = 0 WHERE "offset_acked" IS NULL`,
			`ALTER TABLE `+t.offsets+` DROP COLUMN "last_processed_transaction_id"`,
			`ALTER TABLE `+t.offsets+` ALTER COLUMN "offset_acked" SET NOT NULL, ALTER COLUMN "offset_acked" SET DEFAULT 0`,
		)
	}
	stmts = append(stmts, t.createStatements()...)
	// A counter that existed already (CreateStatements run before) may be
	// behind the renumbered messages.
	stmts = append(stmts, `UPDATE `+t.counter+` SET "last_offset" = GREATEST("last_offset",
		(SELECT COALESCE(MAX("offset"), 0) FROM `+t.messages+`), (SELECT COALESCE(MAX("offset_acked"), 0) FROM `+t.offsets+`))`)
	for _, stmt := range stmts {
		if err := exec(stmt); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sql: upgrade %s: commit: %w", topic, err)
	}
	return nil
}
