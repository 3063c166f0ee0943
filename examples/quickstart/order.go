package main

import (
	"github.com/gooutbox/outbox/runtime"
)

//go:generate go tool outboxgen events.yaml

// Order is the aggregate: a GORM model that records domain events on the
// embedded runtime.Recorder. The events are generated from events.yaml.
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
	o.Record(NewOrderPlaced(clk, customer, total))
}

// Pay records OrderPaid (its latest version, v2).
func (o *Order) Pay(clk runtime.Clock, method string) {
	o.Status = "paid"
	e := NewOrderPaid(clk, method)
	total := o.Total
	e.Amount = &total
	o.Record(e)
}

// PayV1 records OrderPaid as version 1, the way a deployment of the
// producer built before v2 existed still writes it during a rolling update.
// Consumers generated with v2 receive it upcast: no amount, the default
// channel.
func (o *Order) PayV1(clk runtime.Clock, method string) {
	o.Status = "paid"
	o.Record(OrderPaidV1{EventVersion: 1, OccurredAt: runtime.OccurredAt(clk.Now()), Method: method})
}

// Shipment is the consumer side's own model: the shipping service creates
// one per paid order, in the transaction that records the event in its inbox.
type Shipment struct {
	ID      int64 `gorm:"primaryKey"`
	OrderID string
	Method  string
	Channel string
}
