package main

// The writer's side of the outbox: the only file of the driving process
// that uses package hooks (New, Migrate, Plugin.Enqueue, NewStore,
// Store.Stats and Store.Unpark, Shards and ShardOf, the outbox table's id,
// event_id, parked_at and published_at columns to find parked messages,
// its created_at, last_error and attempts columns for the broker outage,
// and its leases table's shard, owner and expires_at columns for the stopped
// and crashed relays)
// and runtime/consumer (Migrate).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gooutbox/outbox/hooks"
	"github.com/gooutbox/outbox/runtime"
	"github.com/gooutbox/outbox/runtime/consumer"
	"github.com/gooutbox/outbox/runtime/sqlstore"
	"github.com/gooutbox/outbox/runtime/sqlstore/databasesql"
)

// outbox is what the driving process needs of the library.
type outbox struct {
	plugin *hooks.Plugin
	store  *sqlstore.Store
	sdb    suiteDB
}

// setupInbox creates the consumer's inbox table on cdb.
func setupInbox(ctx context.Context, cdb *gorm.DB) error {
	drv, err := hooks.NewDriver(cdb)
	if err != nil {
		return fmt.Errorf("migrate inbox: %w", err)
	}
	if err := consumer.Migrate(ctx, drv, ""); err != nil {
		return fmt.Errorf("migrate inbox: %w", err)
	}
	return nil
}

// setupOutbox creates the outbox tables and registers the plugin on db.
func setupOutbox(ctx context.Context, db *gorm.DB, sdb suiteDB) (*outbox, error) {
	if err := hooks.Migrate(ctx, db, ""); err != nil {
		return nil, fmt.Errorf("migrate outbox: %w", err)
	}
	plugin, err := hooks.New(hooks.Config{})
	if err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	if err := db.Use(plugin); err != nil {
		return nil, fmt.Errorf("register plugin: %w", err)
	}
	storeDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	store, err := sqlstore.NewStore(databasesql.New(storeDB), sqlstore.StoreConfig{})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return &outbox{plugin: plugin, store: store, sdb: sdb}, nil
}

// enqueue writes events of aggregateID through tx without touching any
// aggregate row (so without a row lock) and returns their ids in order.
func (o *outbox) enqueue(tx *gorm.DB, aggregateID string, events ...runtime.Event) ([]uuid.UUID, error) {
	ids, err := o.plugin.Enqueue(tx, aggregateType, aggregateID, events...)
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return ids, nil
}

// outboxStats is the outbox's state as the drain check needs it.
type outboxStats struct {
	Pending, Parked int64
}

// stats reads the outbox's pending and parked counts.
func (o *outbox) stats(ctx context.Context) (outboxStats, error) {
	s, err := o.store.Stats(ctx)
	if err != nil {
		return outboxStats{}, fmt.Errorf("outbox stats: %w", err)
	}
	return outboxStats{Pending: s.Pending, Parked: s.Parked}, nil
}

// unpark puts every parked message back in the queue except those of the
// events in keep (the poison ones) and returns how many it unparked.
func (o *outbox) unpark(ctx context.Context, db *gorm.DB, keep map[string]bool) (int64, error) {
	ids, err := o.parked(ctx, db, func(eventID string) bool { return !keep[eventID] })
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := o.store.Unpark(ctx, ids...)
	if err != nil {
		return n, fmt.Errorf("unpark: %w", err)
	}
	return n, nil
}

// discard deletes the parked messages of the events in poison, as an
// operator does with a message the broker will never take: a parked message
// holds its aggregate's later messages back until it is unparked or
// discarded. It returns how many it discarded.
func (o *outbox) discard(ctx context.Context, db *gorm.DB, poison map[string]bool) (int64, error) {
	ids, err := o.parked(ctx, db, func(eventID string) bool { return poison[eventID] })
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	n, err := o.store.Discard(ctx, ids...)
	if err != nil {
		return n, fmt.Errorf("discard: %w", err)
	}
	return n, nil
}

// parked returns the outbox ids of the parked messages whose event id keep
// accepts; it reads the outbox table's parked_at column to find them.
func (o *outbox) parked(ctx context.Context, db *gorm.DB, keep func(eventID string) bool) ([]int64, error) {
	var rows []struct {
		ID      int64
		EventID string
	}
	err := db.WithContext(ctx).Raw(`SELECT id, ` + o.sdb.uuidText("event_id") + ` AS event_id FROM ` + sqlstore.DefaultTable +
		` WHERE parked_at IS NOT NULL AND published_at IS NULL ORDER BY id`).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("find parked messages: %w", err)
	}
	var ids []int64
	for _, r := range rows {
		if keep(r.EventID) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// countPublished counts the events of ids marked published; it reads the
// outbox table's event_id and published_at columns, and PostgreSQL's
// queue.
func (o *outbox) countPublished(ctx context.Context, db *gorm.DB, ids []string) (int64, error) {
	var n int64
	err := db.WithContext(ctx).Raw(`SELECT count(*) FROM `+sqlstore.DefaultTable+
		` WHERE `+o.sdb.uuidText("event_id")+` IN ? AND `+o.sdb.published(), ids).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count published probes: %w", err)
	}
	return n, nil
}

// outageAttempts reads, among the messages committed since since (the
// database's clock) whose last error contains errText, how many there are
// and how many counted more than one attempt (one may be counted at the
// outage's edge, when a batch is refused on some partitions and already
// taken on others); it reads the outbox table's created_at,
// last_error and attempts columns.
func (o *outbox) outageAttempts(ctx context.Context, db *gorm.DB, since time.Time, errText string) (rows, counted int64, err error) {
	var r struct{ Failed, Counted int64 }
	err = db.WithContext(ctx).Raw(`SELECT count(*) AS failed, COALESCE(SUM(CASE WHEN attempts > 1 THEN 1 ELSE 0 END), 0) AS counted FROM `+
		sqlstore.DefaultTable+` WHERE created_at >= ? AND last_error LIKE ?`, since, "%"+errText+"%").Scan(&r).Error
	if err != nil {
		return 0, 0, fmt.Errorf("read outage attempts: %w", err)
	}
	return r.Failed, r.Counted, nil
}

// probeAggregates returns one aggregate id per shard, each named prefix-N.
func probeAggregates(prefix string) []string {
	ids := make([]string, sqlstore.Shards)
	left := sqlstore.Shards
	for n := 0; left > 0; n++ {
		id := prefix + "-" + strconv.Itoa(n)
		if s := sqlstore.ShardOf(aggregateType, id); ids[s] == "" {
			ids[s] = id
			left--
		}
	}
	return ids
}

// leaseOwners reads the owner of every shard's lease.
func (o *outbox) leaseOwners(ctx context.Context, db *gorm.DB) (map[int]string, error) {
	var rows []struct {
		Shard int
		Owner *string
	}
	err := db.WithContext(ctx).Raw(`SELECT shard, owner FROM ` + sqlstore.DefaultTable + `_leases`).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	out := make(map[int]string, len(rows))
	for _, r := range rows {
		if r.Owner != nil {
			out[r.Shard] = *r.Owner
		}
	}
	return out, nil
}

// leaseExpiry reads the latest expiry of owner's leases (the leases
// table's expires_at column); ok is false when owner holds none.
func (o *outbox) leaseExpiry(ctx context.Context, db *gorm.DB, owner string) (at time.Time, ok bool, err error) {
	var exp *time.Time
	err = db.WithContext(ctx).Raw(`SELECT max(expires_at) FROM `+sqlstore.DefaultTable+`_leases WHERE owner = ?`, owner).Scan(&exp).Error
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read lease expiry: %w", err)
	}
	if exp == nil {
		return time.Time{}, false, nil
	}
	return *exp, true, nil
}

// close releases the store's connection.
func (o *outbox) close() error { return o.store.Close() }
