package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/relay"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// exampleOutbox returns a store on a PostgreSQL outbox with two events of
// aggregate order 42: the first published, the second parked.
func exampleOutbox(ctx context.Context) (*sqlstore.Store, func(), error) {
	db, remove, err := exampleDB()
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*sqlstore.Store, func(), error) { remove(); return nil, nil, err }
	if err := sqlstore.Migrate(ctx, databasesql.New(db), sqlstore.Schema{Dialect: sqlstore.Postgres, Outbox: true}); err != nil {
		return fail(err)
	}
	w, err := sqlstore.NewWriter(sqlstore.Postgres, "", sqlstore.WriterConfig{})
	if err != nil {
		return fail(err)
	}
	var rows []sqlstore.Row
	for _, typ := range []string{"orders.placed", "orders.paid"} {
		rows = append(rows, sqlstore.Row{Topic: "orders", Envelope: runtime.Envelope{
			EventID: runtime.NewEventID(), EventType: typ, EventVersion: 1,
			AggregateType: "order", AggregateID: "42", OccurredAt: time.Now(), Payload: []byte(`{}`),
		}})
	}
	if _, err := w.Write(ctx, databasesql.Executor(db), rows); err != nil {
		return fail(err)
	}
	store, err := sqlstore.NewStore(databasesql.New(db), sqlstore.StoreConfig{})
	if err != nil {
		return fail(err)
	}
	b, err := store.Claim(ctx, relay.ClaimRequest{Owner: "example", Limit: 10})
	if err != nil {
		return fail(err)
	}
	err = store.Mark(ctx, b, relay.Outcome{
		Published: []int64{b.Messages[0].ID},
		Failed:    []relay.Failure{{ID: b.Messages[1].ID, Err: errors.New("message too large"), Permanent: true}},
	})
	if err != nil {
		return fail(err)
	}
	return store, func() { store.Close(); remove() }, nil
}

// An operator's tool lists the parked messages page by page, shows the
// backlog per event type, and puts a parked message back in the queue.
func ExampleStore_Entries() {
	ctx := context.Background()
	store, remove, err := exampleOutbox(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer remove()

	q := sqlstore.Query{State: sqlstore.StateParked, Limit: 100}
	for {
		page, err := store.Entries(ctx, q)
		if err != nil {
			fmt.Println(err)
			return
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			fmt.Println(e.ID, e.EventType, e.State, e.LastError)
		}
		q.AfterID = page[len(page)-1].ID // the next page
	}
	groups, err := store.StatsByType(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range groups {
		fmt.Printf("%s %s: %d pending, %d parked\n", g.Topic, g.EventType, g.Pending, g.Parked)
	}
	n, err := store.Unpark(ctx, 2)
	fmt.Println("unparked", n, err)
	// Output:
	// 2 orders.paid parked message too large
	// orders orders.paid: 0 pending, 1 parked
	// unparked 1 <nil>
}

// After a broker lost data, Replay puts published messages back in the
// queue: the relay publishes them again, in order.
func ExampleStore_Replay() {
	ctx := context.Background()
	store, remove, err := exampleOutbox(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer remove()

	n, err := store.Replay(ctx, sqlstore.ReplayRange{Since: time.Now().Add(-time.Hour), Topic: "orders"})
	fmt.Println("replayed", n, err)
	e, err := store.Entry(ctx, 1)
	fmt.Println(e.EventType, e.State, err)
	// Output:
	// replayed 1 <nil>
	// orders.placed pending <nil>
}

// Retention deletes published rows (and, given an inbox, old inbox markers)
// on a schedule; RunOnce runs one pass.
func ExampleNewRetention() {
	ctx := context.Background()
	store, remove, err := exampleOutbox(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer remove()

	ret, err := sqlstore.NewRetention(store, sqlstore.RetentionConfig{
		PublishedAge: time.Nanosecond, // in production: days (default 7)
		Interval:     time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// In production: go ret.Run(ctx), beside the relay.
	res := ret.RunOnce(ctx)
	fmt.Println("deleted", res.Published, res.Err)
	// Output:
	// deleted 1 <nil>
}
