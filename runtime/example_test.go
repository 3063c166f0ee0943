package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gooutbox/outbox/runtime"
)

// OrderPlaced is a hand-written event; outboxgen generates the same shape.
type OrderPlaced struct {
	EventVersion int       `json:"event_version"`
	OccurredAt   time.Time `json:"occurred_at"`
	Total        string    `json:"total"`
}

func (OrderPlaced) EventKey() runtime.Key {
	return runtime.Key{Type: "orders.order_placed", Version: 1}
}
func (e OrderPlaced) EventTime() time.Time { return e.OccurredAt }
func (e OrderPlaced) Validate() error {
	if e.Total == "" {
		return errors.New("total is required")
	}
	return nil
}

type Order struct {
	ID    int64
	Total string
	runtime.Recorder
}

func (o *Order) Place(clk runtime.Clock, total string) {
	o.Total = total
	o.Record(OrderPlaced{EventVersion: 1, OccurredAt: runtime.OccurredAt(clk.Now()), Total: total})
}

func ExampleRecorder() {
	clk := runtime.ClockFunc(func() time.Time { return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) })
	var o Order
	o.Place(clk, "42.00")
	for _, e := range o.Events() {
		fmt.Println(e.EventKey(), e.EventTime().Format(time.RFC3339))
	}
	// The persistence layer (package hooks) confirms events once their
	// transaction commits, through the recorder's state.
	st := o.OutboxRecorder()
	for _, r := range st.Pending() {
		st.Confirm(r.ID)
	}
	fmt.Println("pending after commit:", len(o.Events()))
	// Output:
	// orders.order_placed v1 2026-11-30T09:00:00Z
	// pending after commit: 0
}

func ExampleRegistry_Register() {
	reg := runtime.NewRegistry()
	err := reg.Register(OrderPlaced{}.EventKey(), 1, func(payload []byte) (runtime.Event, error) {
		var e OrderPlaced
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, err
		}
		return e, e.Validate()
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	evt, err := reg.Decode("orders.order_placed", 1, []byte(`{"event_version":1,"occurred_at":"2026-11-30T09:00:00Z","total":"42.00"}`))
	fmt.Printf("%+v %v\n", evt, err)

	_, err = reg.Decode("orders.order_placed", 2, []byte(`{}`))
	var uv *runtime.UnknownVersionError
	if errors.As(err, &uv) {
		fmt.Println(err, "- newer:", uv.Newer())
	}
	// Output:
	// {EventVersion:1 OccurredAt:2026-11-30 09:00:00 +0000 UTC Total:42.00} <nil>
	// outbox: orders.order_placed v2 is newer than the latest known version 1 - newer: true
}
