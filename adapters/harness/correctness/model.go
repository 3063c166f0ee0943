package main

//go:generate go tool outboxgen events.yaml

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/runtime"
)

// aggregateType is the aggregate type (and topic) of every event of the
// suite: Account's and the enqueued ones'.
const aggregateType = "account"

// auditEvery is the balance step at which BeforeSave records Audited.
const auditEvery = 5000

// Account is the aggregate the writers save: a GORM model that records
// events on the embedded Recorder, plus one event recorded by its
// BeforeSave hook. Its AfterSave hook writes the ledger.
type Account struct {
	ID      int64 `gorm:"primaryKey"`
	Owner   string
	Balance int64
	runtime.Recorder

	audited int64 // balance step of the last Audited event
}

// TableName is the accounts table.
func (*Account) TableName() string { return "cs_accounts" }

// AggregateType is "account", the type the enqueued events use too.
func (*Account) AggregateType() string { return aggregateType }

// Open records AccountOpened.
func (a *Account) Open(owner string) {
	a.Owner = owner
	a.Record(NewAccountOpened(runtime.SystemClock{}, owner))
}

// Deposit adds amount and records Deposited.
func (a *Account) Deposit(amount int64) {
	a.Balance += amount
	a.Record(NewDeposited(runtime.SystemClock{}, amount))
}

// BeforeSave records Audited each time the balance crosses a multiple of
// auditEvery: an event recorded by a model hook, after the plugin may have
// looked at the model's pending events.
func (a *Account) BeforeSave(*gorm.DB) error {
	if step := a.Balance / auditEvery; step != a.audited {
		a.audited = step
		a.Record(NewAudited(runtime.SystemClock{}, a.Balance))
	}
	return nil
}

// AfterSave writes a ledger row for each pending event, through the
// statement's connection, so in the save's transaction: a ledger row
// exists iff the transaction that wrote the event committed. Rows of
// events written (and committed) by an earlier save are left as they are.
func (a *Account) AfterSave(tx *gorm.DB) error {
	pending := a.OutboxRecorder().Pending()
	if len(pending) == 0 {
		return nil
	}
	m, ok := tx.Statement.Context.Value(txKey{}).(*txMeta)
	if !ok {
		return errors.New("save without a suite transaction in its context")
	}
	ids := make([]uuid.UUID, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
	}
	return writeLedger(tx, m, strconv.FormatInt(a.ID, 10), ids)
}

// txMeta identifies one transaction attempt of a writer; the context of
// every statement of the attempt carries it.
type txMeta struct {
	writer int
	id     int64
	seq    int // ledger rows written so far: the order of events in the transaction
	// onDup is the ledger INSERT's suffix that skips an existing row
	// (suiteDB.ignoreDuplicate).
	onDup string
}

type txKey struct{}

func withTx(ctx context.Context, m *txMeta) context.Context {
	return context.WithValue(ctx, txKey{}, m)
}

// applyLogDDL returns the statements that create the consumer's apply log,
// on the consumer's PostgreSQL. The ledger and the commit windows are
// suiteDB.ledgerDDL's; the accounts table comes from AutoMigrate.
func applyLogDDL() []string {
	return []string{
		`CREATE TABLE cs_apply_log (
		id bigserial PRIMARY KEY,
		event_id uuid NOT NULL,
		aggregate_id text NOT NULL,
		event_type text NOT NULL)`,
	}
}

// writeLedger inserts the ledger rows of ids, in order, through tx's
// connection (so inside its transaction).
func writeLedger(tx *gorm.DB, m *txMeta, aggregateID string, ids []uuid.UUID) error {
	var sb strings.Builder
	sb.WriteString("INSERT INTO cs_ledger (event_id, aggregate_id, tx_id, seq, writer) VALUES ")
	args := make([]any, 0, 5*len(ids))
	for i, id := range ids {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, ?, ?)")
		m.seq++
		args = append(args, id.String(), aggregateID, m.id, m.seq, m.writer)
	}
	sb.WriteString(m.onDup)
	if err := tx.Session(&gorm.Session{NewDB: true}).Exec(sb.String(), args...).Error; err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	return nil
}

// appendApplyLog records that the consumer applied an event, through the
// inbox transaction tx.
func appendApplyLog(ctx context.Context, tx *gorm.DB, eventID, aggregateID, eventType string) error {
	err := tx.WithContext(ctx).Exec(`INSERT INTO cs_apply_log (event_id, aggregate_id, event_type) VALUES (?, ?, ?)`,
		eventID, aggregateID, eventType).Error
	if err != nil {
		return fmt.Errorf("append apply log: %w", err)
	}
	return nil
}
