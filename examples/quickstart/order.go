package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// Order is the aggregate: a GORM model that records domain events on the
// embedded runtime.Recorder.
type Order struct {
	ID       int64 `gorm:"primaryKey"`
	Customer string
	Status   string
	Total    string // decimal as text
	runtime.Recorder
}

// Place records OrderPlaced.
func (o *Order) Place(clk runtime.Clock, customer, total string) {
	o.Customer, o.Total, o.Status = customer, total, "placed"
	o.Record(OrderPlaced{EventVersion: 1, OccurredAt: runtime.OccurredAt(clk.Now()), Customer: customer, Total: total})
}

// Pay records OrderPaid.
func (o *Order) Pay(clk runtime.Clock, method string) {
	o.Status = "paid"
	o.Record(OrderPaid{EventVersion: 1, OccurredAt: runtime.OccurredAt(clk.Now()), Method: method})
}

// OrderPlaced is written by hand here; outboxgen generates events of this
// shape from a schema.
type OrderPlaced struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Customer     string    `json:"customer"`
	Total        string    `json:"total"`
}

// EventKey implements runtime.Event.
func (OrderPlaced) EventKey() runtime.Key {
	return runtime.Key{Type: "orders.order_placed", Version: 1}
}

// EventTime implements runtime.Event.
func (e OrderPlaced) EventTime() time.Time { return e.OccurredAt }

// Validate implements runtime.Event.
func (e OrderPlaced) Validate() error {
	if e.Customer == "" || e.Total == "" {
		return errors.New("customer and total are required")
	}
	return nil
}

// OrderPaid is recorded when an order is paid.
type OrderPaid struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Method       string    `json:"method"`
}

// EventKey implements runtime.Event.
func (OrderPaid) EventKey() runtime.Key { return runtime.Key{Type: "orders.order_paid", Version: 1} }

// EventTime implements runtime.Event.
func (e OrderPaid) EventTime() time.Time { return e.OccurredAt }

// Validate implements runtime.Event.
func (e OrderPaid) Validate() error {
	if e.Method == "" {
		return errors.New("method is required")
	}
	return nil
}

// register adds the decoders the consumer needs.
func register(r *runtime.Registry) error {
	return errors.Join(
		r.Register(OrderPlaced{}.EventKey(), 1, decodeAs[OrderPlaced]),
		r.Register(OrderPaid{}.EventKey(), 1, decodeAs[OrderPaid]),
	)
}

func decodeAs[E runtime.Event](payload []byte) (runtime.Event, error) {
	var e E
	if err := json.Unmarshal(payload, &e); err != nil {
		return nil, &runtime.DecodeError{Key: e.EventKey(), Err: err}
	}
	if err := e.Validate(); err != nil {
		return nil, &runtime.DecodeError{Key: e.EventKey(), Err: fmt.Errorf("validate: %w", err)}
	}
	return e, nil
}
