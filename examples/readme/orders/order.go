// Package orders is the domain package of the README's examples: the Order
// aggregate and the events it records, generated from events.yaml.
package orders

import "github.com/gooutbox/outbox/runtime"

//go:generate go tool outboxgen events.yaml

// Order is an aggregate: a GORM model whose domain methods record events.
type Order struct {
	ID               int64
	Total            string
	Status           string
	runtime.Recorder // collects events until the save commits
}

// Place records OrderPlaced.
func (o *Order) Place(clk runtime.Clock, total string) {
	o.Total, o.Status = total, "placed"
	o.Record(NewOrderPlaced(clk, total))
}

// Pay records OrderPaid.
func (o *Order) Pay(clk runtime.Clock) {
	o.Status = "paid"
	o.Record(NewOrderPaid(clk, o.Total))
}
