package sql

import (
	"context"
	"database/sql"
	"fmt"
)

// CreateStatements returns the statements that create topic's tables if
// they do not exist, for migrations run with
// [PublisherConfig.SkipSchemaInitialization] and
// [SubscriberConfig.SkipSchemaInitialization]: the messages table, its
// offset counter (one row) and the consumer groups' offsets. Run them in
// order, in one transaction.
func CreateStatements(topic string) ([]string, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	return tablesOf(topic).createStatements(true), nil
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
// for the publishers and subscribers at work and they wait for it; it
// rewrites the messages table once. Stop the programs of the old layout
// first: a publisher of the old layout fails on the new one (its INSERT
// names transaction_id) and keeps its messages to retry; it loses none.
// Tables already of the new layout, or missing, are left as they are:
// Upgrade may run again.
func Upgrade(ctx context.Context, db *sql.DB, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	if err := checkDriver(db); err != nil {
		return err
	}
	t := tablesOf(topic)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sql: upgrade %s: %w", topic, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, t.lockKey()); err != nil {
		return fmt.Errorf("sql: upgrade %s: lock: %w", topic, err)
	}
	legacyMessages, legacyOffsets, err := t.legacyLayout(ctx, tx)
	if err != nil {
		return err
	}
	if !legacyMessages && !legacyOffsets {
		return nil
	}
	if !legacyMessages {
		return fmt.Errorf("sql: upgrade %s: %s has watermill-sql's default layout but %s does not, so the groups' positions cannot be converted", topic, t.offsets, t.messages)
	}
	var offsetsExist bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.offsets).Scan(&offsetsExist); err != nil {
		return fmt.Errorf("sql: upgrade %s: %w", topic, err)
	}
	var payloadIsBytea bool
	if err := tx.QueryRowContext(ctx, `SELECT atttypid = 'bytea'::regtype FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'payload' AND NOT attisdropped`, t.messages).Scan(&payloadIsBytea); err != nil {
		return fmt.Errorf("sql: upgrade %s: read the payload column of %s: %w", topic, t.messages, err)
	}

	stmts := []string{`LOCK TABLE ` + t.messages + ` IN ACCESS EXCLUSIVE MODE`}
	if offsetsExist {
		stmts = append(stmts, `LOCK TABLE `+t.offsets+` IN ACCESS EXCLUSIVE MODE`)
	}
	stmts = append(stmts,
		`ALTER TABLE `+t.messages+` ADD COLUMN "gooutbox_offset" BIGINT`,
		`UPDATE `+t.messages+` m SET "gooutbox_offset" = r.n
			FROM (SELECT "transaction_id", "offset", row_number() OVER (ORDER BY "transaction_id", "offset") AS n FROM `+t.messages+`) r
			WHERE m."transaction_id" = r."transaction_id" AND m."offset" = r."offset"`,
	)
	if offsetsExist {
		// The old subscribers had read every row up to
		// (last_processed_transaction_id, offset_acked) in their order.
		stmts = append(stmts,
			`UPDATE `+t.offsets+` o SET "offset_acked" = (SELECT count(*) FROM `+t.messages+` m
				WHERE (m."transaction_id", m."offset") <= (o."last_processed_transaction_id", COALESCE(o."offset_acked", 0)))`,
			`ALTER TABLE `+t.offsets+` DROP COLUMN "last_processed_transaction_id"`,
			`ALTER TABLE `+t.offsets+` ALTER COLUMN "offset_acked" SET NOT NULL, ALTER COLUMN "offset_acked" SET DEFAULT 0`,
		)
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
	stmts = append(stmts, t.createStatements(offsetsExist)...)
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sql: upgrade %s: %w (statement: %s)", topic, err, stmt)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sql: upgrade %s: commit: %w", topic, err)
	}
	return nil
}
