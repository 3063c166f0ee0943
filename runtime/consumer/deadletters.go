package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// ErrNoTopic is the error of a re-drive of a dead letter whose topic is
// not known (the consumer ran outside a Watermill router) and that was
// given none.
var ErrNoTopic = errors.New("consumer: the dead letter's topic is not known: name the topic to re-drive it to")

// DeadLetterTable is a dead-letter queue in a table of the consumer's own
// database ([sqlstore.DeadLetterDefaultTable] by default), where an
// operator lists the messages a consumer gave up on, shows one, re-drives
// it (publishes it again to the topic it was consumed from) or discards
// it: from Go, or with `outbox deadletters`. Use it as
// [Config.DeadLetterPublisher]:
//
//	dlq, err := consumer.NewDeadLetterTable(drv, "")
//	c, err := consumer.New(reg, consumer.Config{Name: "billing", DB: drv, DeadLetterPublisher: dlq})
//
// A dead letter on a broker topic (any other message.Publisher) is read
// with that broker's tools; one in a table needs none, and it is the same
// on every broker. Create the table with [MigrateDeadLetters] (or
// sqlstore.Schema's DeadLetters, or `outbox migrate --dead-letters`).
//
// A re-driven message keeps its UUID (the event id), payload and
// metadata: if a consumer applied it in the meantime, its inbox makes the
// re-drive a no-op. A DeadLetterTable is safe for concurrent use.
type DeadLetterTable struct {
	t *sqlstore.DeadLetters
}

// NewDeadLetterTable returns the dead-letter table (empty:
// [sqlstore.DeadLetterDefaultTable]) in db, in db's dialect. It returns an
// error wrapping [ErrInvalidTable] or [ErrUnsupportedDialect].
func NewDeadLetterTable(db sqlstore.DB, table string) (*DeadLetterTable, error) {
	if db == nil {
		return nil, fmt.Errorf("consumer: dead-letter table: %w: nil DB", ErrInvalidConfig)
	}
	t, err := sqlstore.NewDeadLetters(db, "", table)
	if err != nil {
		return nil, fmt.Errorf("consumer: dead-letter table: %w", inboxErr(err))
	}
	return &DeadLetterTable{t: t}, nil
}

// MigrateDeadLetters creates the dead-letter table (empty:
// [sqlstore.DeadLetterDefaultTable]) and its index in db if they do not
// exist. It is safe to run on every start.
func MigrateDeadLetters(ctx context.Context, db sqlstore.DB, table string) error {
	if db == nil {
		return fmt.Errorf("consumer: migrate dead-letter table: %w: nil DB", ErrInvalidConfig)
	}
	if err := sqlstore.Migrate(ctx, db, sqlstore.Schema{DeadLetters: true, DeadLetterTable: table}); err != nil {
		return fmt.Errorf("consumer: %w", inboxErr(err))
	}
	return nil
}

// deadLetterKeys are the metadata keys a consumer adds to a dead letter
// (see [MetadataDeadLetterReason]): the table keeps them in columns, and
// a re-drive sets them again.
var deadLetterKeys = []string{MetadataDeadLetterReason, MetadataDeadLetterError, MetadataDeadLetterTopic,
	MetadataDeadLetterConsumer, MetadataDeadLetterAttempts, MetadataDeadLetterAt}

// Publish writes msgs, the dead letters of a consumer, to the table. The
// topic (Config.DeadLetterTopic) is not stored: each row has the topic the
// message was consumed from. It uses each message's context.
func (d *DeadLetterTable) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		attempts, _ := strconv.Atoi(m.Metadata.Get(MetadataDeadLetterAttempts))
		at, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(MetadataDeadLetterAt))
		if err != nil {
			at = time.Now()
		}
		meta := maps.Clone(map[string]string(m.Metadata))
		for _, k := range deadLetterKeys {
			delete(meta, k)
		}
		dl := sqlstore.DeadLetter{
			Consumer:       m.Metadata.Get(MetadataDeadLetterConsumer),
			MessageUUID:    m.UUID,
			Topic:          m.Metadata.Get(MetadataDeadLetterTopic),
			Reason:         m.Metadata.Get(MetadataDeadLetterReason),
			Error:          m.Metadata.Get(MetadataDeadLetterError),
			Attempts:       attempts,
			Payload:        m.Payload,
			Metadata:       meta,
			DeadLetteredAt: at,
		}
		if err := d.t.Add(m.Context(), dl); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
	return nil
}

// Close does nothing: the table's database belongs to the caller.
func (d *DeadLetterTable) Close() error { return nil }

// List returns the dead letters q selects, oldest first.
func (d *DeadLetterTable) List(ctx context.Context, q sqlstore.DeadLetterQuery) ([]sqlstore.DeadLetter, error) {
	return d.t.List(ctx, q)
}

// Get returns the dead letter with the given id, or an error wrapping
// sqlstore.ErrNotFound.
func (d *DeadLetterTable) Get(ctx context.Context, id int64) (sqlstore.DeadLetter, error) {
	return d.t.Get(ctx, id)
}

// Counts returns each consumer's dead letters, waiting and re-driven.
func (d *DeadLetterTable) Counts(ctx context.Context) ([]sqlstore.DeadLetterCount, error) {
	return d.t.Counts(ctx)
}

// Discard deletes the dead letters with the given ids for good and
// returns how many there were.
func (d *DeadLetterTable) Discard(ctx context.Context, ids ...int64) (int64, error) {
	return d.t.Delete(ctx, ids...)
}

// Redrive publishes the dead letter with the given id through pub again,
// to topic, or when topic is "" to the topic it was consumed from, then
// records when it did. The message is the one the consumer received (its
// UUID, payload and metadata) with the dead-letter keys the consumer added
// ([MetadataDeadLetterReason] and the others), as a re-drive from a
// dead-letter topic would publish it. It returns an
// error wrapping sqlstore.ErrNotFound for an unknown id, and [ErrNoTopic]
// when neither topic nor the row names one.
//
// The publish comes first: a failure between it and the record leaves the
// row waiting, and a second re-drive publishes the message again, which
// the consumer's inbox applies once.
func (d *DeadLetterTable) Redrive(ctx context.Context, pub message.Publisher, id int64, topic string) (sqlstore.DeadLetter, error) {
	dl, err := d.t.Get(ctx, id)
	if err != nil {
		return dl, fmt.Errorf("consumer: re-drive: %w", err)
	}
	if topic == "" {
		topic = dl.Topic
	}
	if strings.TrimSpace(topic) == "" {
		return dl, fmt.Errorf("consumer: re-drive dead letter %d (message %s of consumer %q): %w", id, dl.MessageUUID, dl.Consumer, ErrNoTopic)
	}
	m := message.NewMessage(dl.MessageUUID, dl.Payload)
	m.Metadata = make(message.Metadata, len(dl.Metadata)+len(deadLetterKeys))
	maps.Copy(m.Metadata, dl.Metadata)
	// As the consumer published it to a dead-letter topic: brokers that
	// deduplicate by event id (NATS, Redis, SQS FIFO) take a message with
	// MetadataDeadLetterAt for a re-drive, not a repeat of the publish
	// that failed (see "Dead letters" in the package documentation).
	m.Metadata.Set(MetadataDeadLetterReason, dl.Reason)
	m.Metadata.Set(MetadataDeadLetterError, dl.Error)
	m.Metadata.Set(MetadataDeadLetterTopic, dl.Topic)
	m.Metadata.Set(MetadataDeadLetterConsumer, dl.Consumer)
	m.Metadata.Set(MetadataDeadLetterAttempts, strconv.Itoa(dl.Attempts))
	m.Metadata.Set(MetadataDeadLetterAt, dl.DeadLetteredAt.UTC().Format(time.RFC3339Nano))
	m.SetContext(ctx)
	if err := pub.Publish(topic, m); err != nil {
		return dl, fmt.Errorf("consumer: re-drive dead letter %d (message %s) to topic %q: %w", id, dl.MessageUUID, topic, err)
	}
	if err := d.t.MarkRedriven(ctx, id); err != nil {
		return dl, fmt.Errorf("consumer: re-drive dead letter %d: published to %q, but: %w", id, topic, err)
	}
	dl.Topic = topic
	return dl, nil
}
