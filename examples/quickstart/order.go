package main

import (
	"fmt"
	"io"

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

// register adds the decoders the consumer needs: every version of every
// event generated from events.yaml.
func register(r *runtime.Registry) error {
	return Register(r)
}

// storedOrderPaidV1 is an orders.order_paid payload as a producer that
// predates v2 wrote it.
const storedOrderPaidV1 = `{"event_version":1,"occurred_at":"2026-01-02T03:04:05.123456Z","method":"card"}`

// printUpcast shows a consumer built with v2 reading a payload stored as
// v1: the registry's generated decoder validates it and upcasts it to the
// latest version.
func printUpcast(w io.Writer, reg *runtime.Registry) error {
	evt, err := reg.Decode(OrderPaidType, 1, []byte(storedOrderPaidV1))
	if err != nil {
		return fmt.Errorf("decode stored v1 payload: %w", err)
	}
	e := evt.(OrderPaid)
	amount := "none"
	if e.Amount != nil {
		amount = *e.Amount
	}
	fmt.Fprintf(w, "upcast: stored %s v1 %s -> v%d method=%s amount=%s channel=%s\n",
		OrderPaidType, storedOrderPaidV1, e.EventKey().Version, e.Method, amount, e.Channel)
	return nil
}
