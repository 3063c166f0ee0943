package sql

import (
	"errors"
	"fmt"
	"regexp"

	watermillsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
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

// schemaAdapter returns the schema adapter both sides use (see the package
// documentation). batch is the subscriber's batch size, 0 for the default.
func schemaAdapter(batch int) watermillsql.DefaultPostgreSQLSchema {
	return watermillsql.DefaultPostgreSQLSchema{
		GeneratePayloadType: func(string) string { return "BYTEA" },
		SubscribeBatchSize:  batch,
	}
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
