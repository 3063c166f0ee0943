package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/hooks/hookstest"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/outboxgenrt"
)

// The test event, orders.paid, has three versions. Consumers of the tests
// are built with v1 and v2 (v2 latest); v3 stands for a newer deployment of
// the producer.
const paidType = "test.order_paid"

// PaidV1 is version 1: an order id and the aggregate's sequence number.
type PaidV1 struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	OrderID      string    `json:"order_id"`
	Seq          int       `json:"seq"`
}

func (PaidV1) EventKey() runtime.Key  { return runtime.Key{Type: paidType, Version: 1} }
func (e PaidV1) EventTime() time.Time { return e.OccurredAt }
func (e PaidV1) Validate() error {
	if e.OrderID == "" {
		return &runtime.FieldError{Field: "order_id", Problem: "must be set"}
	}
	return nil
}

// PaidV2 adds the currency; a v1 payload upcasts with currency "EUR".
type PaidV2 struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	OrderID      string    `json:"order_id"`
	Seq          int       `json:"seq"`
	Currency     string    `json:"currency"`
}

func (PaidV2) EventKey() runtime.Key  { return runtime.Key{Type: paidType, Version: 2} }
func (e PaidV2) EventTime() time.Time { return e.OccurredAt }
func (e PaidV2) Validate() error {
	if e.OrderID == "" {
		return &runtime.FieldError{Field: "order_id", Problem: "must be set"}
	}
	if e.Currency == "" {
		return &runtime.FieldError{Field: "currency", Problem: "must be set"}
	}
	return nil
}

// PaidV3 adds a note; only the "newer deployment" registry knows it.
type PaidV3 struct {
	PaidV2
	EventVersion int    `json:"event_version"`
	Note         string `json:"note"`
}

func (PaidV3) EventKey() runtime.Key { return runtime.Key{Type: paidType, Version: 3} }

// Shipped is a second event type, registered but handled by few tests.
type Shipped struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	OrderID      string    `json:"order_id"`
}

func (Shipped) EventKey() runtime.Key  { return runtime.Key{Type: "test.order_shipped", Version: 1} }
func (e Shipped) EventTime() time.Time { return e.OccurredAt }
func (Shipped) Validate() error        { return nil }

// decodePaid decodes version v of orders.paid and upcasts it to latest.
func decodePaid(v, latest int, payload []byte) (runtime.Event, error) {
	key := runtime.Key{Type: paidType, Version: v}
	missing, err := outboxgenrt.MissingKeys(payload, "event_version", "occurred_at", "order_id")
	if err != nil {
		return nil, &runtime.DecodeError{Key: key, Err: err}
	}
	if len(missing) > 0 {
		return nil, &runtime.DecodeError{Key: key, Err: &runtime.MissingFieldsError{Fields: missing}}
	}
	var v3 PaidV3
	if err := json.Unmarshal(payload, &v3); err != nil {
		return nil, &runtime.DecodeError{Key: key, Err: err}
	}
	if v < 2 {
		v3.Currency = "EUR" // the v1 → v2 upcaster: v1 prices were all in euros
	}
	v3.PaidV2.EventVersion, v3.EventVersion = 2, 3
	if err := v3.PaidV2.Validate(); err != nil {
		return nil, &runtime.DecodeError{Key: key, Err: err}
	}
	if latest == 3 {
		return v3, nil
	}
	return v3.PaidV2, nil
}

// newRegistry registers versions 1..latest of orders.paid and Shipped v1.
func newRegistry(t testing.TB, latest int) *runtime.Registry {
	t.Helper()
	reg := runtime.NewRegistry()
	for v := 1; v <= latest; v++ {
		err := reg.Register(runtime.Key{Type: paidType, Version: v}, latest, func(p []byte) (runtime.Event, error) {
			return decodePaid(v, latest, p)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err := reg.Register(Shipped{}.EventKey(), 1, func(p []byte) (runtime.Event, error) {
		var e Shipped
		err := json.Unmarshal(p, &e)
		return e, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// paidMessage returns the wire message of orders.paid version v for order
// (the aggregate) with seq.
func paidMessage(t testing.TB, v int, order string, seq int) *message.Message {
	t.Helper()
	var evt runtime.Event
	switch v {
	case 1:
		evt = PaidV1{EventVersion: 1, OccurredAt: t0, OrderID: order, Seq: seq}
	case 2:
		evt = PaidV2{EventVersion: 2, OccurredAt: t0, OrderID: order, Seq: seq, Currency: "USD"}
	case 3:
		evt = PaidV3{PaidV2: PaidV2{OccurredAt: t0, OrderID: order, Seq: seq, Currency: "USD"}, EventVersion: 3, Note: "gift"}
	}
	return toMessage(t, evt, order)
}

// toMessage builds a message the way the relay does.
func toMessage(t testing.TB, evt runtime.Event, aggregateID string) *message.Message {
	t.Helper()
	env, err := runtime.NewEnvelope(context.Background(), uuid.Must(uuid.NewV7()), evt, "order", aggregateID)
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(env.EventID.String(), message.Payload(env.Payload))
	msg.Metadata = env.Metadata()
	return msg
}

// redeliver returns a fresh copy of msg, as a broker delivers it again.
func redeliver(msg *message.Message) *message.Message {
	m := message.NewMessage(msg.UUID, msg.Payload)
	m.Metadata = maps.Clone(msg.Metadata)
	return m
}

// Effect is the row the test handlers write: one per applied event. It has
// no unique constraint, so a duplicate effect would show.
type Effect struct {
	ID       int64 `gorm:"primaryKey"`
	Consumer string
	EventID  string `gorm:"index"`
	OrderID  string
	Seq      int
	Currency string
	Version  int // the version on the wire
}

// databases returns the dialects the inbox supports, each on a fresh
// database with the inbox table and the effects table: "mysql" is the
// MySQL or MariaDB of OUTBOX_TEST_MYSQL_DSN (MariaDB here).
func databases(t *testing.T) map[string]func(t *testing.T) *gorm.DB {
	return map[string]func(t *testing.T) *gorm.DB{
		"postgres": func(t *testing.T) *gorm.DB { return prepare(t, hookstest.Postgres(t, nil)) },
		"sqlite":   func(t *testing.T) *gorm.DB { return prepare(t, hookstest.SQLite(t, nil)) },
		"mysql":    func(t *testing.T) *gorm.DB { return prepare(t, hookstest.MariaDB(t, nil)) },
	}
}

func prepare(t testing.TB, db *gorm.DB) *gorm.DB {
	t.Helper()
	if err := consumer.Migrate(context.Background(), driver(t, db), ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&Effect{}); err != nil {
		t.Fatal(err)
	}
	return db
}

// driver returns db as the storage layer's driver (hooks.NewDriver): the
// Config.DB of a consumer with GORM handlers, and their Handle's driver.
func driver(t testing.TB, db *gorm.DB) *hooks.Driver {
	t.Helper()
	drv, err := hooks.NewDriver(db)
	if err != nil {
		t.Fatal(err)
	}
	return drv
}

// writeEffect is the handler most tests use: one row per event.
func writeEffect(name string) func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
	return func(ctx context.Context, tx *gorm.DB, e PaidV2, m consumer.Meta) error {
		return tx.Create(&Effect{Consumer: name, EventID: m.EventID.String(), OrderID: e.OrderID, Seq: e.Seq,
			Currency: e.Currency, Version: m.EventVersion}).Error
	}
}

func effects(t testing.TB, db *gorm.DB) []Effect {
	t.Helper()
	var out []Effect
	if err := db.Order("id").Find(&out).Error; err != nil {
		t.Fatal(err)
	}
	return out
}

func count(t testing.TB, db *gorm.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.Table(table).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// outcomes collects the results a consumer reports.
type outcomes struct {
	mu      sync.Mutex
	results []consumer.Result
}

func (o *outcomes) record(r consumer.Result) {
	o.mu.Lock()
	o.results = append(o.results, r)
	o.mu.Unlock()
}

// counts returns outcome → number of deliveries.
func (o *outcomes) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[string]int{}
	for _, r := range o.results {
		m[r.Outcome.String()]++
	}
	return m
}

func (o *outcomes) last() consumer.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.results) == 0 {
		return consumer.Result{}
	}
	return o.results[len(o.results)-1]
}

// recordingPublisher is a dead-letter publisher that keeps what it gets.
type recordingPublisher struct {
	mu   sync.Mutex
	msgs map[string][]*message.Message // by topic
	fail error
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	if p.msgs == nil {
		p.msgs = map[string][]*message.Message{}
	}
	p.msgs[topic] = append(p.msgs[topic], msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) topic(name string) []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*message.Message(nil), p.msgs[name]...)
}

// newConsumer builds a consumer, failing the test on error.
func newConsumer(t testing.TB, reg *runtime.Registry, cfg consumer.Config) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var errBoom = errors.New("boom")

func orderName(i int) string { return "order-" + strconv.Itoa(i) }
